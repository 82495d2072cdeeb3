//! Reuse kept out of play: a zero-FLOP rewrite that hides the graph's constant reshape targets
//! from ONNX Runtime's load-time shape inference.
//!
//! ORT's allocation planner hands a freed buffer to a later value of the same resolved shape,
//! and such a buffer stays allocated from its first value to the last read of its last value,
//! empty in between (`docs/design/planner.md`, point 3). In a training graph the freed
//! forward buffers wait, allocated, for backward values of their shape, and a recomputed
//! activation's buffer often goes to its own clone: the recompute then saves nothing where it
//! matters. A value whose dims ORT cannot resolve is never reused and never taken in place
//! (`crate::ort_view`): its buffer goes back to the arena after its last reader, where the BFC
//! arena recycles it for any later request.
//!
//! Rules ([`reuse_guards`]):
//! - every ONNX `Reshape` whose target shape is a constant (an initializer the caller cannot
//!   override, or a `Constant` node's output) reads it through an `Identity`
//!   ([`ckpt_ir::Guard`]): ORT's data propagation does not see through `Identity`, so the
//!   Reshape's output has dims ORT leaves unknown, and so does what is computed from it until
//!   an op's shape function pins the dims again (a broadcast against a known shape, a
//!   reduction, another constant target);
//! - the file's value_info entries of computed values (not graph outputs) are dropped: a
//!   declared dim would win over the unknown one, and ORT infers them itself. Entries that
//!   name a dim (`batch`, `seq`) stay: how ORT carries names through shape functions is not
//!   replayed closely enough (a guarded dynamo graph without them: 1.2% under ORT's need).
//!
//! The guarded graph computes the same values in the same order (the Identities read only
//! initializers, so ORT's order places each right before its Reshape and nothing else
//! moves). Whether it needs less memory is the simulator's call, under the deployment
//! profile: the planner keeps it only when it does.

use std::collections::BTreeSet;

use ckpt_ir::{Graph, Guard, Patch, TensorSource, ONNX_DOMAIN};

use crate::memory::is_constant_node;

/// Whether `t` is a constant ORT's shape functions see: a fixed initializer or a `Constant`
/// node's output (an initializer once ORT loads the model).
fn is_constant(graph: &Graph, t: ckpt_ir::TensorId) -> bool {
    match &graph.tensor(t).source {
        TensorSource::Initializer { overridable, .. } => !overridable,
        TensorSource::Node(p) => is_constant_node(graph, *p),
        TensorSource::GraphInput => false,
    }
}

/// The input of an `op` that carries its output's shape as data, which a guard hides from
/// ORT's shape functions: a `Reshape`'s target (input 1), a `ConstantOfShape`'s shape (input
/// 0: the zeros table an exported embedding gradient scatters into, as large as the weight)
/// and an `Expand`'s shape (input 1: `zeros_like` of the logits in a loss's gradient).
fn guarded_slot(domain: &str, op: &str) -> Option<usize> {
    match (domain, op) {
        (ONNX_DOMAIN, "Reshape") | (ONNX_DOMAIN, "Expand") => Some(1),
        (ONNX_DOMAIN, "ConstantOfShape") => Some(0),
        _ => None,
    }
}

/// Whether a value_info entry declares a dim by name (`batch`, `seq`).
fn has_named_dim(vi: &ckpt_ir::onnx::ValueInfoProto) -> bool {
    use ckpt_ir::onnx::{tensor_shape_proto::dimension::Value, type_proto};
    let Some(type_proto::Value::TensorType(tt)) = vi.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return false;
    };
    tt.shape.as_ref().is_some_and(|s| {
        s.dim
            .iter()
            .any(|d| matches!(&d.value, Some(Value::DimParam(p)) if !p.is_empty()))
    })
}

/// The guards of `graph` (see the module doc), as one labelled patch; empty when the graph
/// has no constant shape to guard.
pub fn reuse_guards(graph: &Graph, label: &str) -> Patch {
    guards_of(graph, label, guarded_slot)
}

/// [`reuse_guards`] of the reshape targets only: the smaller variant, which the planner
/// weighs against the full one (guarding more values also takes them out of ORT's in-place
/// reuse, which can cost more than it frees).
pub fn reshape_guards(graph: &Graph, label: &str) -> Patch {
    guards_of(graph, label, |domain, op| {
        guarded_slot(domain, op).filter(|_| op == "Reshape")
    })
}

fn guards_of(graph: &Graph, label: &str, slot_of: impl Fn(&str, &str) -> Option<usize>) -> Patch {
    let mut patch = Patch::new(label);
    // A guard's Identity node and its output share the name: free among tensors and nodes.
    let mut taken: BTreeSet<String> = graph.node_names().map(str::to_string).collect();
    for &n in graph.nodes() {
        let node = graph.node(n);
        let Some(slot) = slot_of(&node.domain, &node.op_type) else {
            continue;
        };
        let Some(target) = node.inputs.get(slot).copied().flatten() else {
            continue;
        };
        if !is_constant(graph, target) {
            continue;
        }
        let base = &graph.tensor(target).name;
        let mut name = format!("{base}.guard");
        let mut k = 2;
        while graph.tensor_id(&name).is_some() || taken.contains(&name) {
            name = format!("{base}.guard{k}");
            k += 1;
        }
        taken.insert(name.clone());
        patch.guards.push(Guard {
            node: n,
            slot,
            name,
        });
    }
    if patch.guards.is_empty() {
        return patch;
    }
    // Entries with a named dim stay: ORT carries such a name through its shape functions in
    // ways this view does not replay (measured: a guarded dynamo graph with its symbolic
    // entries dropped was predicted 1.2% under ORT's need).
    let declared: BTreeSet<&str> = graph
        .model()
        .graph
        .as_ref()
        .into_iter()
        .flat_map(|g| &g.value_info)
        .filter(|vi| !has_named_dim(vi))
        .filter_map(|vi| vi.name.as_deref())
        .collect();
    patch.forget_value_info = graph
        .tensor_ids()
        .filter(|&t| {
            let tensor = graph.tensor(t);
            matches!(tensor.source, TensorSource::Node(_))
                && !tensor.is_output
                && declared.contains(tensor.name.as_str())
        })
        .collect();
    patch
}
