//! The patch steps that change what a node computes: [`Substitute`] gives a node another op,
//! and a removal takes out a node left unread (with its outputs). Together they fold a
//! node into its reader (`MatMul(Transpose(a), b)` as one `Gemm` reading `a`).

use std::collections::HashSet;

use crate::graph::{Graph, ONNX_DOMAIN};
use crate::ids::{NodeId, TensorId};
use crate::patch::{Patch, PatchError, Substitute};

/// The nodes in `graph`'s file order, to tell a node a patch may change from an id past the
/// graph's or a node already removed.
fn in_order(graph: &Graph) -> HashSet<NodeId> {
    graph.nodes().iter().copied().collect()
}

impl Patch {
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
    /// not graph outputs; their value_info entries are dropped from the model.
    pub(crate) fn remove(&self, graph: &mut Graph) -> Result<(), PatchError> {
        if self.removals.is_empty() {
            return Ok(());
        }
        let mut live = in_order(graph);
        let mut names = HashSet::new();
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
            graph.set_inputs(n, Vec::new());
            for t in outputs {
                names.insert(graph.tensor(t).name.clone());
                graph.removed.insert(t);
            }
        }
        graph.order.retain(|m| live.contains(m));
        graph.drop_model_value_info(&names);
        graph
            .added_value_info
            .retain(|vi| !vi.name.as_deref().is_some_and(|n| names.contains(n)));
        Ok(())
    }
}
