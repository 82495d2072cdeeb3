//! Graph invariants, checked after import and after every patch:
//!
//! 1. Single assignment: every tensor has at most one producer, and it is the one its
//!    `source` names; graph inputs and initializers have none.
//! 2. Defined before use: every node input is a graph input, an initializer, or an output
//!    of a node earlier in file order (what the ONNX checker requires, and what keeps the
//!    exported file valid).
//! 3. No cycles.
//! 4. Consumer lists match node inputs.

use std::collections::HashSet;

use crate::error::VerifyError;
use crate::graph::{Graph, TensorSource};
use crate::ids::TensorId;

/// Check every invariant; the first broken one is returned.
pub fn verify(graph: &Graph) -> Result<(), VerifyError> {
    let mut producers = vec![0usize; graph.tensor_count()];
    for &n in graph.nodes() {
        for t in graph.node(n).output_tensors() {
            producers[t.index()] += 1;
            if graph.tensor(t).producer() != Some(n) {
                return Err(VerifyError::Inconsistent {
                    tensor: graph.tensor(t).name.clone(),
                    what: format!(
                        "output of {n} but its source says {:?}",
                        graph.tensor(t).source
                    ),
                });
            }
        }
    }
    for t in graph.tensor_ids() {
        let tensor = graph.tensor(t);
        let expected = usize::from(matches!(tensor.source, TensorSource::Node(_)));
        if producers[t.index()] != expected && producers[t.index()] > 0 {
            return Err(VerifyError::MultipleProducers {
                tensor: tensor.name.clone(),
                count: producers[t.index()] + 1 - expected,
            });
        }
    }

    let mut defined: HashSet<TensorId> = graph
        .tensor_ids()
        .filter(|&t| !matches!(graph.tensor(t).source, TensorSource::Node(_)))
        .collect();
    for &n in graph.nodes() {
        let node = graph.node(n);
        for t in node.input_tensors() {
            if !defined.contains(&t) {
                return Err(VerifyError::UseBeforeDef {
                    node: node.display_name(n),
                    tensor: graph.tensor(t).name.clone(),
                });
            }
            if !graph.tensor(t).consumers().contains(&n) {
                return Err(VerifyError::Inconsistent {
                    tensor: graph.tensor(t).name.clone(),
                    what: format!("read by {n} but not in its consumer list"),
                });
            }
        }
        defined.extend(node.output_tensors());
    }
    for t in graph.tensor_ids() {
        for &c in graph.tensor(t).consumers() {
            if !graph.node(c).inputs.contains(&Some(t)) {
                return Err(VerifyError::Inconsistent {
                    tensor: graph.tensor(t).name.clone(),
                    what: format!("lists consumer {c}, which does not read it"),
                });
            }
        }
    }
    if graph.has_cycle() {
        return Err(VerifyError::Cycle);
    }
    Ok(())
}
