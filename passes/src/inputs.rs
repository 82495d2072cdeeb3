//! Valid value ranges of integer graph inputs, from what consumes them: token ids index a
//! `Gather` table (range = the table's first dim), labels index the class axis of a loss or
//! a `GatherElements`. The runtime needs these to generate inputs a graph accepts.

use ckpt_ir::ops::{index_use, pass_through, IndexUse};
use ckpt_ir::{Bindings, Graph, TensorId};

/// Where an integer input's range came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntRange {
    pub lo: i64,
    pub hi: i64,
    /// The consumer that implies it, e.g. "indices of Gather `embed` (table dim 0 = 256)".
    pub why: String,
}

/// The range of integer input `t` under `b`, or `None` when nothing implies one.
pub fn int_range(graph: &Graph, t: TensorId, b: &Bindings) -> Option<IntRange> {
    let mut stack = vec![t];
    let mut seen = vec![t];
    while let Some(v) = stack.pop() {
        for &c in graph.tensor(v).consumers() {
            let node = graph.node(c);
            let slots: Vec<usize> = node
                .inputs
                .iter()
                .enumerate()
                .filter(|(_, i)| **i == Some(v))
                .map(|(s, _)| s)
                .collect();
            let dim_of = |data: Option<TensorId>, axis: i64| -> Option<u64> {
                let shape = graph.tensor(data?).shape.clone()?;
                let r = shape.rank() as i64;
                let a = if axis < 0 { axis + r } else { axis };
                shape.dims().get(usize::try_from(a).ok()?)?.eval(b).ok()
            };
            let data = node.inputs.first().copied().flatten();
            let found = match index_use(graph, c) {
                Some(IndexUse::Indices) if slots.contains(&1) => {
                    let axis = node.attr_i("axis").unwrap_or(0);
                    dim_of(data, axis).map(|d| {
                        (
                            d,
                            format!(
                                "indices of {} `{}` (data dim {axis} = {d})",
                                node.op_type, node.name
                            ),
                        )
                    })
                }
                Some(IndexUse::Labels) if slots.contains(&1) => dim_of(data, 1).map(|d| {
                    (
                        d,
                        format!("labels of {} `{}` ({d} classes)", node.op_type, node.name),
                    )
                }),
                _ => None,
            };
            if let Some((hi, why)) = found {
                return Some(IntRange {
                    lo: 0,
                    hi: hi as i64,
                    why,
                });
            }
            // Values that reach the outputs unchanged are followed to their real use.
            let passes = pass_through(graph, c).iter().any(|s| slots.contains(s));
            if passes {
                for o in node.output_tensors() {
                    if !seen.contains(&o) {
                        seen.push(o);
                        stack.push(o);
                    }
                }
            }
        }
    }
    None
}
