//! The patch steps that change what a node computes: [`Substitute`] gives a node another op,
//! a [`NewConstant`] is a constant operand for it, and a removal takes out a node left unread
//! (with its outputs). Together they fold a node into its reader (`MatMul(Transpose(a), b)`
//! as one `Gemm` reading `a`; a slice's gradient scattered into zeros as one `Pad`).

use std::collections::{HashMap, HashSet};

use crate::dtype::DType;
use crate::graph::{Graph, Node, NodeOrigin, Tensor, TensorSource, ONNX_DOMAIN};
use crate::ids::{NodeId, TensorId};
use crate::onnx;
use crate::patch::{NewConstant, Patch, PatchError, Substitute};
use crate::shape::Shape;

/// The nodes in `graph`'s file order, to tell a node a patch may change from an id past the
/// graph's or a node already removed.
fn in_order(graph: &Graph) -> HashSet<NodeId> {
    graph.nodes().iter().copied().collect()
}

impl Patch {
    /// The constants' tensors and `Constant` nodes, each tensor under a name the graph does
    /// not hold yet, typed by its value (placed in file order by [`Patch::place_constants`]).
    pub(crate) fn add_constants(
        &self,
        graph: &mut Graph,
    ) -> Result<Vec<(TensorId, NodeId)>, PatchError> {
        let mut made = Vec::with_capacity(self.constants.len());
        for c in &self.constants {
            let (dtype, shape) = self.constant_type(graph, c)?;
            let t = graph.add_tensor(Tensor {
                name: c.name.clone(),
                dtype: Some(dtype),
                shape: Some(shape),
                source: TensorSource::GraphInput, // set by add_node
                is_output: false,
                consumers: Vec::new(),
            });
            let value = onnx::TensorProto {
                name: Some(c.name.clone()),
                ..c.value.clone()
            };
            let proto = onnx::NodeProto {
                name: Some(c.name.clone()),
                op_type: Some("Constant".into()),
                attribute: vec![onnx::AttributeProto {
                    name: Some("value".into()),
                    r#type: Some(onnx::attribute_proto::AttributeType::Tensor as i32),
                    t: Some(value),
                    ..Default::default()
                }],
                ..Default::default()
            };
            let n = graph.add_node(Node {
                name: c.name.clone(),
                domain: ONNX_DOMAIN.to_string(),
                op_type: "Constant".into(),
                inputs: Vec::new(),
                outputs: vec![Some(t)],
                origin: NodeOrigin::Constant,
                proto: std::sync::Arc::new(proto),
                def: Default::default(),
            });
            made.push((t, n));
        }
        Ok(made)
    }

    /// `c`'s element type and shape: a new name, a known element type, dims that are not
    /// negative, and data held in the value itself.
    fn constant_type(&self, graph: &Graph, c: &NewConstant) -> Result<(DType, Shape), PatchError> {
        let bad = |why: &str| PatchError::BadConstant {
            label: self.label.clone(),
            name: c.name.clone(),
            why: why.to_string(),
        };
        if graph.tensor_id(&c.name).is_some() {
            return Err(PatchError::NameTaken {
                label: self.label.clone(),
                name: c.name.clone(),
            });
        }
        let dtype = c
            .value
            .data_type
            .and_then(DType::from_code)
            .ok_or_else(|| bad("no known element type"))?;
        if c.value.dims.iter().any(|&d| d < 0) {
            return Err(bad("a negative dim"));
        }
        if !c.value.external_data.is_empty() {
            return Err(bad("its data is in another file"));
        }
        let dims: Vec<u64> = c.value.dims.iter().map(|&d| d as u64).collect();
        Ok((dtype, Shape::known(&dims)))
    }

    /// Each constant's node placed in file order right before its anchor, ahead of whatever
    /// else the patch put there (`first_at`: the first node the patch placed before each
    /// anchor).
    pub(crate) fn place_constants(
        &self,
        graph: &mut Graph,
        made: &[(TensorId, NodeId)],
        first_at: &HashMap<NodeId, NodeId>,
    ) -> Result<(), PatchError> {
        if made.is_empty() {
            return Ok(());
        }
        let mut before: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
        for (c, &(_, n)) in self.constants.iter().zip(made) {
            let at = first_at.get(&c.before).copied().unwrap_or(c.before);
            before.entry(at).or_default().push(n);
        }
        graph.insert_before(before).map_err(|anchor| {
            let c = self.constants.iter().find(|c| c.before == anchor);
            PatchError::BadConstant {
                label: self.label.clone(),
                name: c.map_or_else(String::new, |c| c.name.clone()),
                why: format!("no node {anchor} to place it before"),
            }
        })
    }

    /// Each substitute's node given its new op, attributes and inputs.
    pub(crate) fn substitute(
        &self,
        graph: &mut Graph,
        new_tensors: &[TensorId],
    ) -> Result<(), PatchError> {
        if self.substitutes.is_empty() {
            return Ok(());
        }
        let live = in_order(graph);
        for sub in &self.substitutes {
            self.check_substitute(graph, &live, sub)?;
            let inputs = self.resolve_all(new_tensors, &sub.inputs)?;
            let mut proto = (*graph.node(sub.node).proto).clone();
            proto.op_type = Some(sub.op_type.clone());
            proto.domain = None;
            proto.attribute = sub.attributes.clone();
            let node = graph.node_mut(sub.node);
            node.op_type = sub.op_type.clone();
            node.domain = ONNX_DOMAIN.to_string();
            node.proto = std::sync::Arc::new(proto);
            node.def = Default::default();
            graph.set_inputs(sub.node, inputs);
        }
        Ok(())
    }

    fn check_substitute(
        &self,
        graph: &Graph,
        live: &HashSet<NodeId>,
        sub: &Substitute,
    ) -> Result<(), PatchError> {
        let bad = |why: &str| PatchError::BadSubstitute {
            label: self.label.clone(),
            node: sub.node,
            op_type: sub.op_type.clone(),
            why: why.to_string(),
        };
        if !live.contains(&sub.node) {
            return Err(bad("no such node"));
        }
        let opset = graph
            .opset(ONNX_DOMAIN)
            .ok_or_else(|| bad("no ONNX opset"))?;
        if crate::ops::lookup(ONNX_DOMAIN, &sub.op_type, Some(opset)).is_none() {
            return Err(bad("the registry has no such op at the model's opset"));
        }
        Ok(())
    }

    /// Each removal's node taken out of the graph with its outputs, which must be unread and
    /// not graph outputs; their value_info entries are dropped from the model, and so are the
    /// initializers only removed nodes read (not one the caller may override: that is a graph
    /// input too).
    pub(crate) fn remove(&self, graph: &mut Graph) -> Result<(), PatchError> {
        if self.removals.is_empty() {
            return Ok(());
        }
        let mut live = in_order(graph);
        let mut names = HashSet::new();
        let mut read: Vec<TensorId> = Vec::new();
        for &n in &self.removals {
            let bad = |why: String| PatchError::BadRemoval {
                label: self.label.clone(),
                node: n,
                why,
            };
            if !live.remove(&n) {
                return Err(bad("no such node".into()));
            }
            let outputs: Vec<TensorId> = graph.node(n).output_tensors().collect();
            for &t in &outputs {
                let tensor = graph.tensor(t);
                if tensor.is_output || !tensor.consumers().is_empty() {
                    return Err(bad(format!("its output `{}` is still read", tensor.name)));
                }
            }
            read.extend(graph.node(n).input_tensors());
            graph.set_inputs(n, Vec::new());
            for t in outputs {
                names.insert(graph.tensor(t).name.clone());
                graph.removed.insert(t);
            }
        }
        graph.order.retain(|m| live.contains(m));
        let mut constants = HashSet::new();
        for t in read {
            let tensor = graph.tensor(t);
            let own = matches!(
                tensor.source,
                TensorSource::Initializer {
                    overridable: false,
                    ..
                }
            );
            if own && !tensor.is_output && tensor.consumers().is_empty() {
                constants.insert(tensor.name.clone());
                graph.removed.insert(t);
            }
        }
        names.extend(constants.iter().cloned());
        graph.drop_model_entries(&names, &constants);
        graph
            .added_value_info
            .retain(|vi| !vi.name.as_deref().is_some_and(|n| names.contains(n)));
        Ok(())
    }
}
