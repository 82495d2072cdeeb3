//! The patch steps that change what a node computes: [`Substitute`] gives a node another op,
//! and a removal takes out a node left unread (with its outputs). Together they fold a
//! node into its reader (`MatMul(Transpose(a), b)` as one `Gemm` reading `a`).

use std::collections::HashSet;

use crate::graph::{Graph, ONNX_DOMAIN};
use crate::ids::TensorId;
use crate::onnx;
use crate::patch::{Patch, PatchError, Substitute};

impl Patch {
    /// Each substitute's node given its new op, attributes and inputs.
    pub(crate) fn substitute(
        &self,
        graph: &mut Graph,
        new_tensors: &[TensorId],
    ) -> Result<(), PatchError> {
        for sub in &self.substitutes {
            self.check_substitute(graph, sub)?;
            let inputs = self.resolve_all(new_tensors, &sub.inputs)?;
            let old = graph.node(sub.node).inputs.clone();
            let mut proto = (*graph.node(sub.node).proto).clone();
            proto.op_type = Some(sub.op_type.clone());
            proto.domain = None;
            proto.attribute = sub.attributes.clone();
            let node = graph.node_mut(sub.node);
            node.op_type = sub.op_type.clone();
            node.domain = ONNX_DOMAIN.to_string();
            node.proto = std::sync::Arc::new(proto);
            node.def = Default::default();
            node.inputs = inputs.clone();
            for t in old.iter().flatten() {
                graph.disconnect(*t, sub.node);
            }
            for t in inputs.iter().flatten() {
                graph.connect(*t, sub.node);
            }
        }
        Ok(())
    }

    fn check_substitute(&self, graph: &Graph, sub: &Substitute) -> Result<(), PatchError> {
        let bad = |why: &str| PatchError::BadSubstitute {
            label: self.label.clone(),
            node: sub.node,
            op_type: sub.op_type.clone(),
            why: why.to_string(),
        };
        if sub.node.index() >= graph.node_bound() || !graph.nodes().contains(&sub.node) {
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
        let mut names = HashSet::new();
        for &n in &self.removals {
            let bad = |why: String| PatchError::BadRemoval {
                label: self.label.clone(),
                node: n,
                why,
            };
            if n.index() >= graph.node_bound() || !graph.nodes().contains(&n) {
                return Err(bad("no such node".into()));
            }
            let outputs: Vec<TensorId> = graph.node(n).output_tensors().collect();
            for &t in &outputs {
                let tensor = graph.tensor(t);
                if tensor.is_output || !tensor.consumers().is_empty() {
                    return Err(bad(format!("its output `{}` is still read", tensor.name)));
                }
            }
            let inputs: Vec<TensorId> = graph.node(n).input_tensors().collect();
            graph.node_mut(n).inputs.clear();
            for t in inputs {
                graph.disconnect(t, n);
            }
            graph.order.retain(|&m| m != n);
            for t in outputs {
                names.insert(graph.tensor(t).name.clone());
                graph.removed.insert(t);
            }
        }
        drop_value_info(graph, &names);
        Ok(())
    }
}

/// The model's value_info entries named in `names` dropped.
fn drop_value_info(graph: &mut Graph, names: &HashSet<String>) {
    let mut model: onnx::ModelProto = (*graph.model).clone();
    if let Some(g) = model.graph.as_mut() {
        g.value_info
            .retain(|vi| !vi.name.as_deref().is_some_and(|n| names.contains(n)));
    }
    graph.model = std::sync::Arc::new(model);
    graph.model_decls = Default::default();
    graph
        .added_value_info
        .retain(|vi| !vi.name.as_deref().is_some_and(|n| names.contains(n)));
}
