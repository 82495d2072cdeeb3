//! Rewrites as values. A [`Patch`] names the tensors and nodes to add, where each new node
//! goes in file order, which node inputs to rewire, and model metadata to set. It prints,
//! so a plan can be snapshot-tested before it is applied; [`Patch::apply`] is the only
//! way a graph's structure changes, and it verifies the result.

use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::error::VerifyError;
use crate::graph::{Graph, Node, NodeOrigin, Tensor, TensorSource};
use crate::ids::{NodeId, TensorId};
use crate::onnx;
use crate::verify::verify;

/// A tensor a patch refers to: one that exists, or the i-th of the patch's new tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorRef {
    Existing(TensorId),
    New(usize),
    /// The i-th of the patch's new constants ([`NewConstant`]).
    Constant(usize),
}

/// A tensor to create, typed like an existing one or left untyped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTensor {
    pub name: String,
    /// dtype, shape and value_info are copied from this tensor; with `None` the tensor has
    /// none, and the analysis infers its type from the node that writes it (a
    /// [`FreshNode`]'s output, whose shape no existing tensor has).
    pub like: Option<TensorId>,
}

/// A node to create: a copy of `copy_of` (op, attributes) with new wiring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewNode {
    pub name: String,
    pub copy_of: NodeId,
    pub inputs: Vec<Option<TensorRef>>,
    pub outputs: Vec<Option<TensorRef>>,
    /// Inserted in file order right before this node (after earlier new nodes with the same anchor).
    pub before: NodeId,
}

/// A node to create of the op `op_type` (an ONNX op looked up at the model's ONNX opset, or
/// of `domain`) with `attributes`: an op or a shape no node of the graph has to copy (the
/// chunks of a loss head, their `Slice`s and `Concat`). It writes only new tensors, and is
/// placed in file order like a [`NewNode`], after the patch's copies with the same anchor.
#[derive(Clone, Debug, PartialEq)]
pub struct FreshNode {
    pub name: String,
    /// The op's domain and the opset version to import it at where the model does not
    /// import it yet (`com.microsoft`, 1: ONNX Runtime's contrib ops); `None`: the ONNX
    /// domain.
    pub domain: Option<(String, i64)>,
    pub op_type: String,
    pub attributes: Vec<onnx::AttributeProto>,
    pub inputs: Vec<Option<TensorRef>>,
    pub outputs: Vec<Option<TensorRef>>,
    /// Inserted in file order right before this node.
    pub before: NodeId,
}

/// A constant to create: a `Constant` node (ONNX Runtime folds it into an initializer at
/// load) writing the new tensor `name`, typed by `value`'s element type and dims, placed in
/// file order right before `before` (ahead of the patch's other nodes there). A substitute's
/// constant operand is one (the `pads` of a `Pad`).
#[derive(Clone, Debug, PartialEq)]
pub struct NewConstant {
    pub name: String,
    pub value: onnx::TensorProto,
    pub before: NodeId,
}

/// Move an existing node to another place in file order, with new inputs (same op,
/// attributes and outputs). A recompute whose original would be left without readers is a
/// move: the node runs later instead of twice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    pub node: NodeId,
    pub inputs: Vec<Option<TensorRef>>,
    /// Placed in file order right before this node (the node itself: it stays where it is)…
    pub before: NodeId,
    /// …and, among the patch's nodes with the same anchor, after its first `after_new` new nodes.
    pub after_new: usize,
}

impl Move {
    /// Move `node` of `graph`, inputs unchanged, to just before `before` (a pure reorder).
    pub fn reorder(graph: &crate::Graph, node: NodeId, before: NodeId) -> Move {
        Move {
            node,
            inputs: graph
                .node(node)
                .inputs
                .iter()
                .map(|i| i.map(TensorRef::Existing))
                .collect(),
            before,
            after_new: 0,
        }
    }
}

/// Replace input `slot` of `node`, which must currently read `from`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rewire {
    pub node: NodeId,
    pub slot: usize,
    pub from: TensorId,
    pub to: TensorRef,
}

/// Hide input `slot` of `node` from ONNX Runtime's load-time shape inference: the node reads
/// `Identity(x)` (new tensor `name`, typed like `x`) instead of `x`. The same values at zero
/// FLOPs; ORT's data propagation does not see through `Identity`, so the data of a constant
/// `x` (a `Reshape`'s target shape) no longer reaches the node's shape function, and what
/// the node computes has dims ORT leaves unknown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guard {
    pub node: NodeId,
    pub slot: usize,
    pub name: String,
}

/// Replace `node`'s op with the ONNX op `op_type` (looked up at the model's ONNX opset), with
/// `attributes`, reading `inputs`: its outputs, name and place in file order stay. A reader
/// that can take a transposed operand reads the operand itself this way
/// (`ckpt_passes::fold`).
#[derive(Clone, Debug, PartialEq)]
pub struct Substitute {
    pub node: NodeId,
    pub op_type: String,
    pub attributes: Vec<onnx::AttributeProto>,
    pub inputs: Vec<Option<TensorRef>>,
}

/// A labelled rewrite.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Patch {
    pub label: String,
    pub tensors: Vec<NewTensor>,
    pub nodes: Vec<NewNode>,
    /// Nodes of an op of their own to create, placed after `nodes` (a [`Move`]'s `after_new`
    /// counts both, `nodes` first).
    pub fresh: Vec<FreshNode>,
    /// Constants to create, added with the new tensors.
    pub constants: Vec<NewConstant>,
    pub rewires: Vec<Rewire>,
    pub moves: Vec<Move>,
    /// Nodes given another op, applied after the rewires.
    pub substitutes: Vec<Substitute>,
    /// Nodes removed with their outputs, applied after the substitutes: each must be left
    /// unread and write no graph output.
    pub removals: Vec<NodeId>,
    /// Inputs hidden from ORT's inference, applied after the removals.
    pub guards: Vec<Guard>,
    /// Tensors whose value_info entries in the file are dropped: ORT then infers their types
    /// itself (entries a patch added are kept).
    pub forget_value_info: Vec<TensorId>,
    /// Model `metadata_props` entries to set (replacing an existing key).
    pub metadata: Vec<(String, String)>,
}

/// What an applied patch created.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub tensors: Vec<TensorId>,
    pub nodes: Vec<NodeId>,
}

/// Why a patch could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    #[error("patch `{label}`: tensor name `{name}` already exists")]
    NameTaken { label: String, name: String },
    #[error("patch `{label}`: node name `{name}` already exists (ONNX Runtime refuses two nodes of one name)")]
    NodeNameTaken { label: String, name: String },
    #[error("patch `{label}`: new tensor #{index} does not exist")]
    NoSuchNewTensor { label: String, index: usize },
    #[error("patch `{label}`: new constant #{index} does not exist")]
    NoSuchConstant { label: String, index: usize },
    #[error("patch `{label}`: constant `{name}` cannot be made: {why}")]
    BadConstant {
        label: String,
        name: String,
        why: String,
    },
    #[error("patch `{label}`: new tensor `{name}` is produced more than once")]
    Reassigned { label: String, name: String },
    #[error("patch `{label}`: node {node} slot {slot} reads `{actual}`, not `{expected}`")]
    RewireMismatch {
        label: String,
        node: NodeId,
        slot: usize,
        expected: String,
        actual: String,
    },
    #[error("patch `{label}`: node {node} is moved twice or has {actual} inputs, not {expected}")]
    BadMove {
        label: String,
        node: NodeId,
        expected: usize,
        actual: usize,
    },
    #[error("patch `{label}`: node {node} has no input in slot {slot} to guard")]
    BadGuard {
        label: String,
        node: NodeId,
        slot: usize,
    },
    #[error("patch `{label}`: node {node} cannot become `{op_type}`: {why}")]
    BadSubstitute {
        label: String,
        node: NodeId,
        op_type: String,
        why: String,
    },
    #[error("patch `{label}`: node {node} cannot be removed: {why}")]
    BadRemoval {
        label: String,
        node: NodeId,
        why: String,
    },
    #[error("patch `{label}` broke the graph: {source}")]
    Verify { label: String, source: VerifyError },
}

impl Patch {
    pub fn new(label: impl Into<String>) -> Patch {
        Patch {
            label: label.into(),
            ..Default::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
            && self.nodes.is_empty()
            && self.fresh.is_empty()
            && self.constants.is_empty()
            && self.rewires.is_empty()
            && self.moves.is_empty()
            && self.substitutes.is_empty()
            && self.removals.is_empty()
            && self.guards.is_empty()
            && self.forget_value_info.is_empty()
            && self.metadata.is_empty()
    }

    /// Apply to `graph`, then verify. On error the graph may be partly changed: apply to a clone
    /// when the original must survive.
    pub fn apply(&self, graph: &mut Graph) -> Result<Applied, PatchError> {
        let applied = self.apply_unverified(graph)?;
        verify(graph).map_err(|source| PatchError::Verify {
            label: self.label.clone(),
            source,
        })?;
        Ok(applied)
    }

    /// [`Patch::apply`] without the final verification, for throwaway trial graphs (a search
    /// simulating thousands of candidate rewrites). The rewrite that is kept goes through
    /// [`Patch::apply`].
    pub fn apply_unverified(&self, graph: &mut Graph) -> Result<Applied, PatchError> {
        self.check_node_names(graph)?;
        let mut applied = Applied::default();
        let mut declared = Declared::default();
        applied.tensors = self.add_tensors(graph, &mut declared)?;
        let constants = self.add_constants(graph)?;
        applied.tensors.extend(constants.iter().map(|&(t, _)| t));
        let (nodes, mut new_inserts) = self.add_nodes(graph, &applied.tensors)?;
        applied.nodes = nodes;
        let (fresh, fresh_inserts) = self.add_fresh(graph, &applied.tensors)?;
        applied.nodes.extend(fresh);
        new_inserts.extend(fresh_inserts);
        let (moved, move_inserts) = self.move_nodes(graph, &applied.tensors)?;
        let first_at = place_in_order(graph, new_inserts, move_inserts, &moved);
        self.place_constants(graph, &constants, &first_at)?;
        applied.nodes.extend(constants.iter().map(|&(_, n)| n));
        self.rewire(graph, &applied.tensors)?;
        self.substitute(graph, &applied.tensors)?;
        self.remove(graph)?;
        self.apply_guards(graph, &mut declared, &mut applied)?;
        self.forget_value_info(graph);
        self.set_metadata(graph);
        Ok(applied)
    }
}

impl Patch {
    /// Every node the patch adds (copies, constants, guards) under a name no node of the graph
    /// has and no other new node takes: ONNX Runtime does not load a model with two nodes of
    /// one non-empty name.
    fn check_node_names(&self, graph: &Graph) -> Result<(), PatchError> {
        if self.nodes.is_empty()
            && self.fresh.is_empty()
            && self.constants.is_empty()
            && self.guards.is_empty()
        {
            return Ok(());
        }
        let new = self
            .nodes
            .iter()
            .map(|n| &n.name)
            .chain(self.fresh.iter().map(|n| &n.name))
            .chain(self.constants.iter().map(|c| &c.name))
            .chain(self.guards.iter().map(|g| &g.name))
            .filter(|n| !n.is_empty());
        let mut taken: HashSet<&str> = graph.node_names().collect();
        for name in new {
            if !taken.insert(name.as_str()) {
                return Err(PatchError::NodeNameTaken {
                    label: self.label.clone(),
                    name: name.clone(),
                });
            }
        }
        Ok(())
    }

    /// The new tensors, each under a name the graph does not hold yet, typed like its model.
    fn add_tensors(
        &self,
        graph: &mut Graph,
        declared: &mut Declared,
    ) -> Result<Vec<TensorId>, PatchError> {
        let mut tensors = Vec::with_capacity(self.tensors.len());
        for nt in &self.tensors {
            if graph.tensor_id(&nt.name).is_some() {
                return Err(PatchError::NameTaken {
                    label: self.label.clone(),
                    name: nt.name.clone(),
                });
            }
            tensors.push(match nt.like {
                Some(like) => add_tensor_like(graph, declared, like, &nt.name),
                None => graph.add_tensor(Tensor {
                    name: nt.name.clone(),
                    dtype: None,
                    shape: None,
                    source: TensorSource::GraphInput, // set by add_node
                    is_output: false,
                    consumers: Vec::new(),
                }),
            });
        }
        Ok(tensors)
    }

    /// The tensor a [`TensorRef`] names, given the ids of the patch's new tensors.
    pub(crate) fn resolve(
        &self,
        new_tensors: &[TensorId],
        r: TensorRef,
    ) -> Result<TensorId, PatchError> {
        match r {
            TensorRef::Existing(t) => Ok(t),
            TensorRef::New(i) if i < self.tensors.len() => Ok(new_tensors[i]),
            TensorRef::New(i) => Err(PatchError::NoSuchNewTensor {
                label: self.label.clone(),
                index: i,
            }),
            // The constants' tensors follow the new tensors in `new_tensors`.
            TensorRef::Constant(i) => new_tensors
                .get(self.tensors.len() + i)
                .filter(|_| i < self.constants.len())
                .copied()
                .ok_or(PatchError::NoSuchConstant {
                    label: self.label.clone(),
                    index: i,
                }),
        }
    }

    /// Resolves each of `refs`, keeping the omitted slots.
    pub(crate) fn resolve_all(
        &self,
        new_tensors: &[TensorId],
        refs: &[Option<TensorRef>],
    ) -> Result<Vec<Option<TensorId>>, PatchError> {
        refs.iter()
            .map(|r| r.map(|r| self.resolve(new_tensors, r)).transpose())
            .collect()
    }

    /// The new nodes, each a copy of its template writing only new tensors, each once; their
    /// ids, and each with the anchor it goes before.
    fn add_nodes(
        &self,
        graph: &mut Graph,
        new_tensors: &[TensorId],
    ) -> Result<(Vec<NodeId>, Vec<Placement>), PatchError> {
        let fresh: HashSet<TensorId> = new_tensors[..self.tensors.len()].iter().copied().collect();
        let mut produced = HashSet::new();
        let mut ids = Vec::with_capacity(self.nodes.len());
        let mut inserts: Vec<Placement> = Vec::new();
        for nn in &self.nodes {
            let template = graph.node(nn.copy_of);
            let (domain, op_type) = (template.domain.clone(), template.op_type.clone());
            // The copy shares its template's stored proto (attributes and all; its own name is
            // the node's, written over the proto's on export) and its registry entry.
            let (proto, def) = (template.proto.clone(), template.def.clone());
            let inputs = self.resolve_all(new_tensors, &nn.inputs)?;
            let outputs = self.resolve_all(new_tensors, &nn.outputs)?;
            self.claim(graph, &fresh, &mut produced, &outputs)?;
            let id = graph.add_node(Node {
                name: nn.name.clone(),
                domain,
                op_type,
                inputs,
                outputs,
                origin: NodeOrigin::Recompute { of: nn.copy_of },
                proto,
                def,
            });
            inserts.push((id, nn.before));
            ids.push(id);
        }
        Ok((ids, inserts))
    }

    /// `outputs`, a new node's, claimed in `produced`: each must be one of the patch's new
    /// tensors (`fresh`) that no node claimed before.
    fn claim(
        &self,
        graph: &Graph,
        fresh: &HashSet<TensorId>,
        produced: &mut HashSet<TensorId>,
        outputs: &[Option<TensorId>],
    ) -> Result<(), PatchError> {
        for &o in outputs.iter().flatten() {
            if !fresh.contains(&o) || !produced.insert(o) {
                return Err(PatchError::Reassigned {
                    label: self.label.clone(),
                    name: graph.tensor(o).name.clone(),
                });
            }
        }
        Ok(())
    }

    /// The fresh nodes, each writing only new tensors no other new node writes; their ids,
    /// and each with the anchor it goes before.
    fn add_fresh(
        &self,
        graph: &mut Graph,
        new_tensors: &[TensorId],
    ) -> Result<(Vec<NodeId>, Vec<Placement>), PatchError> {
        let fresh: HashSet<TensorId> = new_tensors[..self.tensors.len()].iter().copied().collect();
        let mut produced: HashSet<TensorId> = self
            .nodes
            .iter()
            .flat_map(|n| n.outputs.iter().flatten())
            .filter_map(|&r| self.resolve(new_tensors, r).ok())
            .collect();
        let mut ids = Vec::with_capacity(self.fresh.len());
        let mut inserts: Vec<Placement> = Vec::with_capacity(self.fresh.len());
        for fnode in &self.fresh {
            let inputs = self.resolve_all(new_tensors, &fnode.inputs)?;
            let outputs = self.resolve_all(new_tensors, &fnode.outputs)?;
            self.claim(graph, &fresh, &mut produced, &outputs)?;
            let proto = onnx::NodeProto {
                name: Some(fnode.name.clone()),
                domain: fnode.domain.as_ref().map(|(d, _)| d.clone()),
                op_type: Some(fnode.op_type.clone()),
                attribute: fnode.attributes.clone(),
                ..Default::default()
            };
            let domain = match &fnode.domain {
                Some((d, version)) => {
                    graph.import_opset(d, *version);
                    crate::graph::normalise_domain(d)
                }
                None => crate::graph::ONNX_DOMAIN.to_string(),
            };
            let id = graph.add_node(Node {
                name: fnode.name.clone(),
                domain,
                op_type: fnode.op_type.clone(),
                inputs,
                outputs,
                origin: NodeOrigin::Fresh,
                proto: std::sync::Arc::new(proto),
                def: Default::default(),
            });
            inserts.push((id, fnode.before));
            ids.push(id);
        }
        Ok((ids, inserts))
    }

    /// The moved nodes' new inputs, connected now; the moved nodes, and each move as
    /// `(after_new, node, before)` for [`place_in_order`].
    fn move_nodes(
        &self,
        graph: &mut Graph,
        new_tensors: &[TensorId],
    ) -> Result<(HashSet<NodeId>, Vec<MovePlacement>), PatchError> {
        let mut moved = HashSet::new();
        let mut inserts: Vec<MovePlacement> = Vec::new();
        for mv in &self.moves {
            let old_inputs = graph.node(mv.node).inputs.clone();
            if !moved.insert(mv.node) || old_inputs.len() != mv.inputs.len() {
                return Err(PatchError::BadMove {
                    label: self.label.clone(),
                    node: mv.node,
                    expected: old_inputs.len(),
                    actual: mv.inputs.len(),
                });
            }
            let inputs = self.resolve_all(new_tensors, &mv.inputs)?;
            graph.set_inputs(mv.node, inputs);
            inserts.push((mv.after_new, mv.node, mv.before));
        }
        Ok((moved, inserts))
    }

    /// Each rewire's reader input switched from `from` (which it must read) to `to`.
    fn rewire(&self, graph: &mut Graph, new_tensors: &[TensorId]) -> Result<(), PatchError> {
        for rw in &self.rewires {
            let to = self.resolve(new_tensors, rw.to)?;
            let actual = graph.node(rw.node).inputs.get(rw.slot).copied().flatten();
            if actual != Some(rw.from) {
                return Err(PatchError::RewireMismatch {
                    label: self.label.clone(),
                    node: rw.node,
                    slot: rw.slot,
                    expected: graph.tensor(rw.from).name.clone(),
                    actual: actual.map_or("nothing".to_string(), |t| graph.tensor(t).name.clone()),
                });
            }
            graph.node_mut(rw.node).inputs[rw.slot] = Some(to);
            graph.disconnect(rw.from, rw.node);
            graph.connect(to, rw.node);
        }
        Ok(())
    }

    /// The model's value_info entries of the tensors in `forget_value_info`, dropped.
    fn forget_value_info(&self, graph: &mut Graph) {
        if self.forget_value_info.is_empty() {
            return;
        }
        let names: HashSet<String> = self
            .forget_value_info
            .iter()
            .map(|&t| graph.tensor(t).name.clone())
            .collect();
        graph.drop_model_entries(&names, &HashSet::new());
    }

    /// The patch's metadata entries, set over the model's (a key already there keeps its place).
    fn set_metadata(&self, graph: &mut Graph) {
        for (k, v) in &self.metadata {
            let props = &mut std::sync::Arc::make_mut(&mut graph.model).metadata_props;
            match props.iter_mut().find(|e| e.key.as_deref() == Some(k)) {
                Some(e) => e.value = Some(v.clone()),
                None => props.push(onnx::StringStringEntryProto {
                    key: Some(k.clone()),
                    value: Some(v.clone()),
                }),
            }
        }
    }
}

/// A node to place in file order and the anchor it goes before.
type Placement = (NodeId, NodeId);
/// A moved node to place: after how many of the new nodes, the node, its anchor.
type MovePlacement = (usize, NodeId, NodeId);

/// Places the new and moved nodes in file order: before their anchors, in patch order, each
/// move after the first `after_new` new nodes; a moved node leaves its old place. Returns the
/// first node placed before each anchor.
fn place_in_order(
    graph: &mut Graph,
    new_inserts: Vec<Placement>,
    mut move_inserts: Vec<MovePlacement>,
    moved: &HashSet<NodeId>,
) -> HashMap<NodeId, NodeId> {
    // One sequence: each move after the first `after_new` new nodes.
    move_inserts.sort_by_key(|m| m.0);
    let mut inserts: Vec<Placement> = Vec::with_capacity(new_inserts.len() + move_inserts.len());
    let mut pending = move_inserts.into_iter().peekable();
    for (k, ins) in new_inserts.into_iter().enumerate() {
        while let Some(&(at, n, b)) = pending.peek() {
            if at > k {
                break;
            }
            inserts.push((n, b));
            pending.next();
        }
        inserts.push(ins);
    }
    inserts.extend(pending.map(|(_, n, b)| (n, b)));
    let mut at_anchor: HashMap<NodeId, Vec<NodeId>> = Default::default();
    for &(id, anchor) in &inserts {
        at_anchor.entry(anchor).or_default().push(id);
    }
    let mut order = Vec::with_capacity(graph.order.len() + inserts.len());
    for &n in &graph.order {
        if let Some(ids) = at_anchor.get(&n) {
            order.extend(ids);
        }
        if !moved.contains(&n) {
            order.push(n);
        }
    }
    graph.order = order;
    at_anchor
        .into_iter()
        .map(|(anchor, ids)| (anchor, ids[0]))
        .collect()
}

impl Patch {
    /// The guards: an `Identity` per guarded input, placed in file order right before its
    /// reader, and the reader rewired to it.
    fn apply_guards(
        &self,
        graph: &mut Graph,
        declared: &mut Declared,
        applied: &mut Applied,
    ) -> Result<(), PatchError> {
        if self.guards.is_empty() {
            return Ok(());
        }
        let mut before: std::collections::HashMap<NodeId, Vec<NodeId>> = Default::default();
        for gd in &self.guards {
            let bad = || PatchError::BadGuard {
                label: self.label.clone(),
                node: gd.node,
                slot: gd.slot,
            };
            if gd.node.index() >= graph.node_bound() {
                return Err(bad());
            }
            let Some(x) = graph.node(gd.node).inputs.get(gd.slot).copied().flatten() else {
                return Err(bad());
            };
            if graph.tensor_id(&gd.name).is_some() {
                return Err(PatchError::NameTaken {
                    label: self.label.clone(),
                    name: gd.name.clone(),
                });
            }
            let out = add_tensor_like(graph, declared, x, &gd.name);
            let proto = onnx::NodeProto {
                name: Some(gd.name.clone()),
                op_type: Some("Identity".into()),
                ..Default::default()
            };
            let id = graph.add_node(Node {
                name: gd.name.clone(),
                domain: crate::ONNX_DOMAIN.to_string(),
                op_type: "Identity".into(),
                inputs: vec![Some(x)],
                outputs: vec![Some(out)],
                origin: NodeOrigin::Guard,
                proto: std::sync::Arc::new(proto),
                def: Default::default(),
            });
            before.entry(gd.node).or_default().push(id);
            graph.node_mut(gd.node).inputs[gd.slot] = Some(out);
            graph.disconnect(x, gd.node);
            graph.connect(out, gd.node);
            applied.tensors.push(out);
            applied.nodes.push(id);
        }
        // A guarded node that is not in the graph's order is refused.
        graph.insert_before(before).map_err(|anchor| {
            let g = self.guards.iter().find(|g| g.node == anchor);
            PatchError::BadGuard {
                label: self.label.clone(),
                node: anchor,
                slot: g.map_or(0, |g| g.slot),
            }
        })
    }
}

/// A new tensor `name` typed like `like` (dtype, shape, and a copy of its value_info entry),
/// its producer set when a node is added for it.
fn add_tensor_like(
    graph: &mut Graph,
    declared: &mut Declared,
    like: TensorId,
    name: &str,
) -> TensorId {
    let template = graph.tensor(like).clone();
    if let Some(vi) = declared.like(graph, like, name) {
        graph.added_value_info.push(vi);
        declared.added(graph);
    }
    graph.add_tensor(Tensor {
        name: name.to_string(),
        dtype: template.dtype,
        shape: template.shape,
        source: TensorSource::GraphInput, // set by add_node
        is_output: false,
        consumers: Vec::new(),
    })
}

/// Where each name's first declaration is, for the new tensors of one patch: the model's
/// value_info, outputs and inputs (in that order: [`Graph::model_declarations`], built once
/// per model), then the entries added to the graph, indexed on the first lookup and as they
/// are pushed.
#[derive(Default)]
struct Declared {
    /// Name -> index in the graph's added entries, for names the model does not declare.
    added: Option<std::collections::HashMap<String, usize>>,
}

impl Declared {
    /// The first declaration of `name`: (list, index), list 3 the graph's added entries.
    fn first(&mut self, graph: &Graph, name: &str) -> Option<(u8, usize)> {
        if let Some(&found) = graph.model_declarations().get(name) {
            return Some(found);
        }
        let added = self.added.get_or_insert_with(|| {
            let mut first = std::collections::HashMap::new();
            for (i, vi) in graph.added_value_info.iter().enumerate() {
                if let Some(n) = vi.name.as_deref() {
                    first.entry(n.to_string()).or_insert(i);
                }
            }
            first
        });
        added.get(name).map(|&i| (3, i))
    }

    /// A value_info for `name` typed like `like`: a copy of the first entry declaring `like`,
    /// when there is one (a graph without a `graph` field has none).
    fn like(&mut self, graph: &Graph, like: TensorId, name: &str) -> Option<onnx::ValueInfoProto> {
        let g = graph.model.graph.as_ref()?;
        let (l, i) = self.first(graph, graph.tensor(like).name.as_str())?;
        let found = match l {
            0 => &g.value_info[i],
            1 => &g.output[i],
            2 => &g.input[i],
            _ => &graph.added_value_info[i],
        };
        let mut vi = found.clone();
        vi.name = Some(name.to_string());
        vi.doc_string = None;
        Some(vi)
    }

    /// The entry just pushed onto the graph's added value_info, indexed (unless its name was
    /// declared before: the first declaration stays the one copied).
    fn added(&mut self, graph: &Graph) {
        let i = graph.added_value_info.len() - 1;
        let Some(n) = graph.added_value_info[i].name.as_deref() else {
            return;
        };
        if graph.model_declarations().contains_key(n) {
            return;
        }
        if let Some(added) = self.added.as_mut() {
            added.entry(n.to_string()).or_insert(i);
        }
    }
}

/// The patch against no graph: existing tensors by [`TensorId`] (`%154`), new ones `new0`…
/// (the text form's module doc says when these are the printer's numbers);
/// [`crate::print_patch`] prints against a graph's numbering.
impl fmt::Display for Patch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |t: TensorRef| match t {
            TensorRef::Existing(t) => t.to_string(),
            TensorRef::New(i) => format!("new{i}"),
            TensorRef::Constant(i) => format!("const{i}"),
        };
        crate::text::write_patch(f, self, &name)
    }
}
