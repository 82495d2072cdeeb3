//! The graph IR: nodes and first-class tensors over a petgraph `StableDiGraph`.
//!
//! Invariants (checked by [`crate::verify`]): every tensor has at most one producer;
//! every node input names a tensor that is a graph input, an initializer or the output of
//! a node earlier in file order; the node graph is acyclic. petgraph indices never leave
//! this module: callers see [`NodeId`] and [`TensorId`].
//!
//! The graph keeps the imported `ModelProto` as its template, so that everything the pass
//! does not change (initializers, external data references, metadata, functions,
//! value_info, doc strings, attributes) is exported byte for byte as it came in.

use std::collections::HashMap;
use std::path::PathBuf;

use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::NodeIndexable;
use std::sync::Arc;

use crate::dtype::DType;
use crate::ids::{NodeId, TensorId};
use crate::onnx;
use crate::shape::Shape;

/// The ONNX default domain, as node keys spell it.
pub const ONNX_DOMAIN: &str = "ai.onnx";

/// Where an initializer's bytes live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InitData {
    /// In the model file (raw_data or typed fields).
    Embedded,
    /// In another file, never read to plan: `location` relative to the model directory.
    External {
        location: String,
        offset: u64,
        length: Option<u64>,
    },
}

/// Where a tensor's value comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TensorSource {
    /// Fed by the caller at run time.
    GraphInput,
    /// A constant stored with the model; `overridable` when also listed as a graph input.
    Initializer { data: InitData, overridable: bool },
    /// Computed by a node.
    Node(NodeId),
}

/// A value of the graph.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub name: String,
    /// `None` until known from the file or inferred.
    pub dtype: Option<DType>,
    /// `None` when the rank is unknown.
    pub shape: Option<Shape>,
    pub source: TensorSource,
    /// Listed in the graph's outputs.
    pub is_output: bool,
    pub(crate) consumers: Vec<NodeId>,
}

impl Tensor {
    /// Nodes reading this tensor, once each, in the order they were connected.
    pub fn consumers(&self) -> &[NodeId] {
        &self.consumers
    }

    /// The producing node, if computed by one.
    pub fn producer(&self) -> Option<NodeId> {
        match self.source {
            TensorSource::Node(n) => Some(n),
            _ => None,
        }
    }

    pub fn is_graph_input(&self) -> bool {
        matches!(self.source, TensorSource::GraphInput)
    }

    pub fn is_initializer(&self) -> bool {
        matches!(self.source, TensorSource::Initializer { .. })
    }
}

/// How a node came to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeOrigin {
    /// Read from the model file.
    Imported,
    /// A recompute clone of the named original node.
    Recompute { of: NodeId },
    /// An `Identity` a patch put in front of a node's input ([`crate::patch::Guard`]).
    Guard,
    /// A `Constant` a patch added ([`crate::patch::NewConstant`]).
    Constant,
    /// A node of an op of its own a patch added ([`crate::patch::FreshNode`]).
    Fresh,
}

/// An operator application.
#[derive(Clone, Debug)]
pub struct Node {
    /// The node's name in the file (may be empty; ONNX names are optional).
    pub name: String,
    /// Normalised domain: `ai.onnx` for the default domain.
    pub domain: String,
    pub op_type: String,
    /// One entry per input slot; `None` for an omitted optional input (`""` in the file).
    pub inputs: Vec<Option<TensorId>>,
    /// One entry per output slot; `None` for an omitted optional output.
    pub outputs: Vec<Option<TensorId>>,
    pub origin: NodeOrigin,
    /// The node as stored in the file: attributes, doc string, metadata, overload.
    /// Its input/output name lists are rewritten from `inputs`/`outputs` on export, and its
    /// name from `name` where they differ (a recompute clone shares its original's proto).
    pub(crate) proto: std::sync::Arc<onnx::NodeProto>,
    /// The op registry's entry, as found for the opset it was looked up under (the op of a
    /// node never changes; clones share the answer).
    pub(crate) def: std::sync::OnceLock<(Option<i64>, Option<&'static crate::ops::OpDef>)>,
}

impl Node {
    /// Whether `other` is this node as stored (the same stored proto, inputs and outputs): a
    /// node of a cloned graph that nothing replaced.
    pub fn same_stored(&self, other: &Node) -> bool {
        std::sync::Arc::ptr_eq(&self.proto, &other.proto)
            && self.domain == other.domain
            && self.op_type == other.op_type
            && self.inputs == other.inputs
            && self.outputs == other.outputs
    }

    /// Whether this node applies `other`'s op with `other`'s attributes (its inputs and
    /// outputs, and its name, may differ): the same stored proto, or a copy of it such as a
    /// recompute clone's. A shape rule infers for it what it infers for `other` from the
    /// same input types.
    pub fn same_rule_as(&self, other: &Node) -> bool {
        self.domain == other.domain
            && self.op_type == other.op_type
            && (std::sync::Arc::ptr_eq(&self.proto, &other.proto)
                || (self.proto.domain == other.proto.domain
                    && self.proto.overload == other.proto.overload
                    && self.proto.attribute == other.proto.attribute))
    }

    /// The attribute named `name`.
    pub fn attr(&self, name: &str) -> Option<&onnx::AttributeProto> {
        self.proto
            .attribute
            .iter()
            .find(|a| a.name.as_deref() == Some(name))
    }

    /// All attributes, in file order.
    pub fn attributes(&self) -> &[onnx::AttributeProto] {
        &self.proto.attribute
    }

    pub fn attr_i(&self, name: &str) -> Option<i64> {
        self.attr(name).and_then(|a| a.i)
    }

    pub fn attr_f(&self, name: &str) -> Option<f32> {
        self.attr(name).and_then(|a| a.f)
    }

    pub fn attr_ints(&self, name: &str) -> Option<&[i64]> {
        self.attr(name).map(|a| a.ints.as_slice())
    }

    pub fn attr_s(&self, name: &str) -> Option<String> {
        self.attr(name)
            .and_then(|a| a.s.as_ref())
            .map(|s| String::from_utf8_lossy(s).into_owned())
    }

    pub fn attr_t(&self, name: &str) -> Option<&onnx::TensorProto> {
        self.attr(name).and_then(|a| a.t.as_ref())
    }

    /// Present inputs, skipping omitted optional slots.
    pub fn input_tensors(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.inputs.iter().flatten().copied()
    }

    /// Present outputs, skipping omitted optional slots.
    pub fn output_tensors(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.outputs.iter().flatten().copied()
    }

    /// `domain::op_type`, or just `op_type` in the default domain.
    pub fn op_label(&self) -> String {
        if self.domain == ONNX_DOMAIN {
            self.op_type.clone()
        } else {
            format!("{}::{}", self.domain, self.op_type)
        }
    }

    /// A name for messages: the file name, or `op_type` and id when unnamed.
    pub fn display_name(&self, id: NodeId) -> String {
        if self.name.is_empty() {
            format!("{} {}", self.op_type, id)
        } else {
            self.name.clone()
        }
    }
}

/// A training graph.
#[derive(Clone, Debug)]
pub struct Graph {
    /// Shared: patches clone graphs often and change the model only in its metadata.
    pub(crate) model: std::sync::Arc<onnx::ModelProto>,
    /// Where each name the model declares is first declared: (list, index), the lists
    /// value_info (0), outputs (1) and inputs (2). Built on first use and shared with the
    /// graph's clones; replaced with the model's declarations (not its metadata).
    pub(crate) model_decls: Arc<std::sync::OnceLock<HashMap<String, (u8, usize)>>>,
    /// Nodes and tensors are shared between a graph and its clones (patches clone graphs
    /// often, and change few of them): a change copies the one it changes.
    pub(crate) g: StableDiGraph<Arc<Node>, TensorId>,
    pub(crate) tensors: Vec<Arc<Tensor>>,
    /// Names, shared with the graph this one was cloned from; the names added since are in
    /// `added_names` (a name there shadows one here).
    pub(crate) by_name: Arc<HashMap<String, TensorId>>,
    pub(crate) added_names: HashMap<String, TensorId>,
    /// Nodes in file order; ONNX Runtime numbers nodes in this order.
    pub(crate) order: Vec<NodeId>,
    pub(crate) inputs: Vec<TensorId>,
    pub(crate) outputs: Vec<TensorId>,
    /// value_info entries for tensors that patches created.
    pub(crate) added_value_info: Vec<onnx::ValueInfoProto>,
    /// The directory external data is resolved against.
    pub(crate) dir: Option<PathBuf>,
    /// Tensors whose producer a patch removed ([`crate::patch::Patch::removals`]): no name
    /// finds them.
    pub(crate) removed: std::collections::BTreeSet<TensorId>,
}

pub(crate) fn nx(id: NodeId) -> NodeIndex {
    NodeIndex::new(id.index())
}

impl Graph {
    /// The model this graph was imported from (as imported, before any patch).
    pub fn model(&self) -> &onnx::ModelProto {
        &self.model
    }

    /// Where each name the model declares is first declared ([`Graph::model_decls`]'s doc).
    pub(crate) fn model_declarations(&self) -> &HashMap<String, (u8, usize)> {
        self.model_decls.get_or_init(|| {
            let g = self.model.graph.as_ref();
            let lists = [
                g.map(|g| &g.value_info[..]).unwrap_or_default(),
                g.map(|g| &g.output[..]).unwrap_or_default(),
                g.map(|g| &g.input[..]).unwrap_or_default(),
            ];
            let mut first = HashMap::with_capacity(lists.iter().map(|l| l.len()).sum());
            for (l, list) in lists.iter().enumerate() {
                for (i, vi) in list.iter().enumerate() {
                    if let Some(n) = vi.name.as_deref() {
                        first.entry(n.to_string()).or_insert((l as u8, i));
                    }
                }
            }
            first
        })
    }

    pub fn ir_version(&self) -> i64 {
        self.model.ir_version.unwrap_or(0)
    }

    /// Opset imports as (normalised domain, version).
    pub fn opsets(&self) -> Vec<(String, i64)> {
        self.model
            .opset_import
            .iter()
            .map(|o| {
                (
                    normalise_domain(o.domain.as_deref().unwrap_or("")),
                    o.version.unwrap_or(0),
                )
            })
            .collect()
    }

    /// Import `domain` at `version` where the model does not import it yet.
    pub(crate) fn import_opset(&mut self, domain: &str, version: i64) {
        if self.opset(&normalise_domain(domain)).is_none() {
            std::sync::Arc::make_mut(&mut self.model)
                .opset_import
                .push(onnx::OperatorSetIdProto {
                    domain: Some(domain.to_string()),
                    version: Some(version),
                });
        }
    }

    /// The opset version imported for `domain` (normalised).
    pub fn opset(&self, domain: &str) -> Option<i64> {
        self.model
            .opset_import
            .iter()
            .find(|o| match o.domain.as_deref().unwrap_or("") {
                "" => domain == ONNX_DOMAIN,
                d => d == domain,
            })
            .map(|o| o.version.unwrap_or(0))
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.g[nx(id)]
    }

    pub fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id.index()]
    }

    /// Whether tensor `t` of this graph is `other`'s, unchanged since one was cloned from the
    /// other (the same stored tensor, not an equal copy).
    pub fn shares_tensor(&self, other: &Graph, t: TensorId) -> bool {
        match (self.tensors.get(t.index()), other.tensors.get(t.index())) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Whether tensor `t` is the same value in this graph and in `other`, where both share
    /// the model its data is stored in: the same name, declared type and source (its
    /// consumers may differ). A graph input or initializer that is keeps its type and data.
    pub fn same_value(&self, other: &Graph, t: TensorId) -> bool {
        if !self.shares_model(other) {
            return false;
        }
        match (self.tensors.get(t.index()), other.tensors.get(t.index())) {
            (Some(a), Some(b)) => {
                Arc::ptr_eq(a, b)
                    || (a.name == b.name
                        && a.dtype == b.dtype
                        && a.shape == b.shape
                        && a.source == b.source)
            }
            _ => false,
        }
    }

    /// Whether this graph's model is `other`'s (the same stored model: neither changed its
    /// metadata since one was cloned from the other).
    pub fn shares_model(&self, other: &Graph) -> bool {
        Arc::ptr_eq(&self.model, &other.model)
    }

    /// Tensor by name.
    pub fn tensor_id(&self, name: &str) -> Option<TensorId> {
        self.added_names
            .get(name)
            .or_else(|| self.by_name.get(name))
            .copied()
            .filter(|t| !self.removed.contains(t))
    }

    /// All tensor ids, in creation order: `TensorId::index` runs from 0 to
    /// [`Graph::tensor_count`], for side tables. A tensor a patch removed is still listed,
    /// read by nothing and produced by no node in file order ([`Graph::is_removed`]).
    pub fn tensor_ids(&self) -> impl Iterator<Item = TensorId> + '_ {
        (0..self.tensors.len() as u32).map(TensorId)
    }

    /// Whether a patch removed `t` with its producer ([`crate::Patch::removals`]).
    pub fn is_removed(&self, t: TensorId) -> bool {
        self.removed.contains(&t)
    }

    pub fn tensor_count(&self) -> usize {
        self.tensors.len()
    }

    /// Nodes in file order.
    pub fn nodes(&self) -> &[NodeId] {
        &self.order
    }

    pub fn node_count(&self) -> usize {
        self.order.len()
    }

    /// The names of the nodes, in file order (an unnamed node's is empty).
    pub fn node_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.order.iter().map(|&n| self.node(n).name.as_str())
    }

    /// Upper bound of node indices, for side tables indexed by `NodeId::index`.
    pub fn node_bound(&self) -> usize {
        self.g.node_bound()
    }

    pub fn inputs(&self) -> &[TensorId] {
        &self.inputs
    }

    pub fn outputs(&self) -> &[TensorId] {
        &self.outputs
    }

    /// Initializers, in tensor order (not those a patch removed).
    pub fn initializers(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.tensor_ids()
            .filter(|&t| self.tensor(t).is_initializer() && !self.is_removed(t))
    }

    /// Nodes that consume an output of `n` (once each, ordered by id).
    pub fn successors(&self, n: NodeId) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self
            .g
            .neighbors(nx(n))
            .map(|i| NodeId(i.index() as u32))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Nodes producing an input of `n` (once each, ordered by id).
    pub fn predecessors(&self, n: NodeId) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self
            .g
            .neighbors_directed(nx(n), petgraph::Direction::Incoming)
            .map(|i| NodeId(i.index() as u32))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Position of each node in file order, indexed by `NodeId::index` (`usize::MAX` if absent).
    pub fn file_positions(&self) -> Vec<usize> {
        let mut pos = vec![usize::MAX; self.node_bound()];
        for (i, n) in self.order.iter().enumerate() {
            pos[n.index()] = i;
        }
        pos
    }

    /// Symbolic dim names used by any tensor, sorted.
    pub fn symbols(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .tensors
            .iter()
            .filter_map(|t| t.shape.as_ref())
            .flat_map(|s| s.symbols())
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// The directory the model was read from (external data resolves against it).
    /// The value_info entries patches added for the tensors they created (exported after the
    /// file's own).
    pub fn added_value_info(&self) -> &[onnx::ValueInfoProto] {
        &self.added_value_info
    }

    pub fn dir(&self) -> Option<&std::path::Path> {
        self.dir.as_deref()
    }

    /// Set a tensor's dtype and shape (used by shape inference, which fills what the file
    /// left out; it never changes structure).
    pub fn set_type(&mut self, t: TensorId, dtype: Option<DType>, shape: Option<Shape>) {
        let tensor = self.tensor_mut(t);
        tensor.dtype = dtype;
        tensor.shape = shape;
    }

    // ---- structural mutation: crate-private, used by import and `Patch::apply` only ----

    pub(crate) fn add_tensor(&mut self, t: Tensor) -> TensorId {
        let id = TensorId(self.tensors.len() as u32);
        match Arc::get_mut(&mut self.by_name) {
            // Not shared (importing): the names stay in one table.
            Some(names) if self.added_names.is_empty() => names.insert(t.name.clone(), id),
            _ => self.added_names.insert(t.name.clone(), id),
        };
        self.tensors.push(Arc::new(t));
        id
    }

    /// Tensor `t`, to change (copied first if a clone shares it).
    pub(crate) fn tensor_mut(&mut self, t: TensorId) -> &mut Tensor {
        Arc::make_mut(&mut self.tensors[t.index()])
    }

    pub(crate) fn add_node(&mut self, node: Node) -> NodeId {
        let inputs: Vec<TensorId> = node.input_tensors().collect();
        let outputs: Vec<TensorId> = node.output_tensors().collect();
        let id = NodeId(self.g.add_node(Arc::new(node)).index() as u32);
        for t in outputs {
            self.tensor_mut(t).source = TensorSource::Node(id);
        }
        for t in inputs {
            self.connect(t, id);
        }
        id
    }

    /// `node` reads `inputs` from now on: the tensors it no longer reads drop it from their
    /// consumers (and their edges), the ones it reads anew record it; the others are left
    /// alone (a search's trial moves change few inputs).
    pub(crate) fn set_inputs(&mut self, node: NodeId, inputs: Vec<Option<TensorId>>) {
        let old = std::mem::replace(&mut self.node_mut(node).inputs, inputs);
        let new = self.node(node).inputs.clone();
        for t in old.iter().flatten().filter(|t| !new.contains(&Some(**t))) {
            self.disconnect(*t, node);
        }
        for t in new.iter().flatten().filter(|t| !old.contains(&Some(**t))) {
            self.connect(*t, node);
        }
    }

    /// The model's value_info entries named in `value_info` (ORT then infers those types
    /// itself, or the tensors are gone) and its initializers named in `initializers`
    /// (constants a removal left unread) dropped, in one edit of the model.
    pub(crate) fn drop_model_entries(
        &mut self,
        value_info: &std::collections::HashSet<String>,
        initializers: &std::collections::HashSet<String>,
    ) {
        let named = |names: &std::collections::HashSet<String>, n: &Option<String>| {
            n.as_deref().is_some_and(|n| names.contains(n))
        };
        let model = std::sync::Arc::make_mut(&mut self.model);
        if let Some(g) = model.graph.as_mut() {
            g.value_info.retain(|vi| !named(value_info, &vi.name));
            g.initializer.retain(|i| !named(initializers, &i.name));
        }
        self.model_decls = Default::default();
    }

    /// Each list of `before` placed in file order right before its anchor node; the file
    /// order is left as it was, and the anchor named, where an anchor is not in it.
    pub(crate) fn insert_before(
        &mut self,
        mut before: HashMap<NodeId, Vec<NodeId>>,
    ) -> Result<(), NodeId> {
        let added: usize = before.values().map(Vec::len).sum();
        let mut order = Vec::with_capacity(self.order.len() + added);
        for &n in &self.order {
            if let Some(ids) = before.remove(&n) {
                order.extend(ids);
            }
            order.push(n);
        }
        if let Some(&anchor) = before.keys().next() {
            return Err(anchor);
        }
        self.order = order;
        Ok(())
    }

    /// Record that `consumer` reads `t` (edge from its producer, consumer list).
    pub(crate) fn connect(&mut self, t: TensorId, consumer: NodeId) {
        if !self.tensors[t.index()].consumers.contains(&consumer) {
            self.tensor_mut(t).consumers.push(consumer);
        }
        self.add_edge_once(t, consumer);
    }

    /// [`Graph::connect`] for a `consumer` never connected to `t` before (import connects
    /// each node once): no search of `t`'s consumers, so a tensor read by every node of a
    /// large graph costs linear time.
    pub(crate) fn connect_new(&mut self, t: TensorId, consumer: NodeId) {
        self.tensor_mut(t).consumers.push(consumer);
        self.add_edge_once(t, consumer);
    }

    /// The edge from `t`'s producer to `consumer` carrying `t`, unless there is one (found
    /// among the consumer's few incoming edges, not the producer's many outgoing ones).
    fn add_edge_once(&mut self, t: TensorId, consumer: NodeId) {
        use petgraph::visit::EdgeRef;
        if let TensorSource::Node(p) = self.tensors[t.index()].source {
            let present = self
                .g
                .edges_directed(nx(consumer), petgraph::Direction::Incoming)
                .any(|e| e.source() == nx(p) && *e.weight() == t);
            if !present {
                self.g.add_edge(nx(p), nx(consumer), t);
            }
        }
    }

    /// Remove the record of `consumer` reading `t`, if no slot of it still does.
    pub(crate) fn disconnect(&mut self, t: TensorId, consumer: NodeId) {
        if self.g[nx(consumer)].inputs.contains(&Some(t)) {
            return;
        }
        if self.tensors[t.index()].consumers.contains(&consumer) {
            self.tensor_mut(t).consumers.retain(|&c| c != consumer);
        }
        if let TensorSource::Node(p) = self.tensors[t.index()].source {
            let edges: Vec<_> = self
                .g
                .edges_connecting(nx(p), nx(consumer))
                .filter(|e| *e.weight() == t)
                .map(|e| petgraph::visit::EdgeRef::id(&e))
                .collect();
            for e in edges {
                self.g.remove_edge(e);
            }
        }
    }

    /// Node `id`, to change (copied first if a clone shares it).
    pub(crate) fn node_mut(&mut self, id: NodeId) -> &mut Node {
        Arc::make_mut(&mut self.g[nx(id)])
    }

    /// Whether some node depends on itself: Kahn's peeling, iterative (no recursion, so any
    /// chain length is walked in O(nodes + edges) time and heap memory).
    pub(crate) fn has_cycle(&self) -> bool {
        use petgraph::Direction::Incoming;
        let mut indegree = vec![0usize; self.g.node_bound()];
        let mut ready: Vec<NodeIndex> = Vec::new();
        for i in self.g.node_indices() {
            indegree[i.index()] = self.g.neighbors_directed(i, Incoming).count();
            if indegree[i.index()] == 0 {
                ready.push(i);
            }
        }
        let mut peeled = 0usize;
        while let Some(i) = ready.pop() {
            peeled += 1;
            for j in self.g.neighbors(i) {
                indegree[j.index()] -= 1;
                if indegree[j.index()] == 0 {
                    ready.push(j);
                }
            }
        }
        peeled != self.g.node_count()
    }
}

/// `""` and `ai.onnx` are the same domain.
pub fn normalise_domain(d: &str) -> String {
    if d.is_empty() {
        ONNX_DOMAIN.to_string()
    } else {
        d.to_string()
    }
}
