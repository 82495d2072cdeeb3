//! ONNX Runtime's default node execution order (ORT 1.31.1, `ExecutionOrder::DEFAULT`).
//!
//! The memory model must simulate nodes in the order ORT really runs them, which is
//! *not* the order of the model file. This module reproduces that order from plain data;
//! the evidence (source references and profiling experiments) is in `docs/design/ort-internals.md`.
//!
//! # Rules implemented
//!
//! 1. **Node index** = position of the node in the `GraphProto.node` list *after removing
//!    `Constant` nodes* (ORT's `Graph` constructor turns every `Constant` node into an
//!    initializer before numbering nodes; their outputs are then initializers, i.e. they
//!    are not edges). `memory::schedule` numbers a graph this way.
//! 2. **Edges**: a node's input nodes are the producers of its input tensors, one entry per
//!    consumed input slot (explicit inputs, plus implicit inputs of subgraph-holding nodes
//!    such as `If`/`Loop`/`Scan`). Graph inputs, initializers and missing optional inputs
//!    have no producer. Graph outputs create **no** edge.
//! 3. **Leaves** = nodes none of whose outputs is consumed by another node — whether or not
//!    they produce a graph output (a graph output that is also consumed does not make its
//!    producer a leaf). Dead nodes (outputs used by nobody) are leaves and still execute.
//! 4. **Walk** (`GraphViewer` constructor → `Graph::ReverseDFSFrom(leaves, enter = none,
//!    leave = append, comp = NodeCompare)`): an explicit stack, initialised with the
//!    leaves in ascending index order (so the *highest-index leaf is expanded first*).
//!    Pop an entry; a "leave" entry appends its node to the order; an unvisited node is
//!    marked visited, re-pushed as a "leave" entry, then its input nodes, sorted ascending
//!    by index, are pushed if not yet visited (so the *highest-index input is expanded
//!    first* and finishes first). Post-order ⇒ the result is topological.
//!
//! Graph outputs, node names, op types and slot positions play no role; only the producer
//! indices do. The random-DAG experiment (`scripts/ort_probe/random_dags.py`) matched ORT's
//! profiled order on every graph tried (see the doc); `ort_profiled_cases.txt` replays
//! 300 of those profiles in the tests below.
//!
//! # What the caller must account for
//!
//! ORT numbers the nodes of the graph *after* its level-1 ("basic") graph transformers ran:
//! removed nodes leave holes (indices are not compacted) and nodes created by a fusion get
//! fresh indices `MaxNodeIndex(), MaxNodeIndex()+1, …` in creation order. If a transformer
//! fires (constant folding of constant-only subgraphs, `MatMul`+`Add` → `Gemm`, Identity /
//! Dropout / Cast / Unsqueeze elimination, the transpose optimizer …) feed the transformed
//! graph, with holes modelled as nodes without inputs that the caller drops from the result
//! (a hole has no edges, so it never perturbs the order of the real nodes).

use std::fmt;

/// One node as ORT sees it; its index is its position in the slice, which must be its ORT
/// node index (file position with `Constant` nodes removed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OrderNode {
    /// Producer node index of each input slot, in slot order: explicit inputs, then
    /// implicit (subgraph) inputs. `None` for graph inputs, initializers (including former
    /// `Constant` outputs) and missing optional inputs. Repeats are fine (`Mul(a, a)`).
    pub inputs: Vec<Option<usize>>,
}

impl OrderNode {
    /// A node whose input slots are fed by the given producers (`None` = no producer).
    pub fn new(inputs: impl IntoIterator<Item = Option<usize>>) -> Self {
        OrderNode {
            inputs: inputs.into_iter().collect(),
        }
    }
}

/// Why a node table has no ORT order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScheduleError {
    /// `nodes[node].inputs` names a producer index `>= nodes.len()`.
    ProducerOutOfRange { node: usize, producer: usize },
    /// The graph has a cycle through `node` (ORT rejects such a model at load time).
    Cycle { node: usize },
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleError::ProducerOutOfRange { node, producer } => {
                write!(
                    f,
                    "node {node} names producer {producer}, which does not exist"
                )
            }
            ScheduleError::Cycle { node } => write!(f, "the graph has a cycle through node {node}"),
        }
    }
}

impl std::error::Error for ScheduleError {}

/// ORT 1.31's default execution order: the node indices in the order the sequential
/// executor runs them. Every node appears exactly once; a producer index out of range or
/// a cycle is an error.
pub fn try_ort_default_order(nodes: &[OrderNode]) -> Result<Vec<usize>, ScheduleError> {
    let n = nodes.len();
    let mut has_consumer = vec![false; n];
    for (node, on) in nodes.iter().enumerate() {
        for &producer in on.inputs.iter().flatten() {
            if producer >= n {
                return Err(ScheduleError::ProducerOutOfRange { node, producer });
            }
            has_consumer[producer] = true;
        }
    }

    // GraphViewer::GraphViewer: leaves in ascending index order, pushed in that order.
    #[derive(Clone, Copy)]
    enum Entry {
        Enter(usize),
        Leave(usize),
    }
    let mut stack: Vec<Entry> = (0..n)
        .filter(|&i| !has_consumer[i])
        .map(Entry::Enter)
        .collect();
    let mut visited = vec![false; n];
    let mut order = Vec::with_capacity(n);
    let mut sorted_inputs: Vec<usize> = Vec::new();

    // Graph::ReverseDFSFrom with enter = nullptr, leave = push_back, comp = NodeCompare.
    while let Some(entry) = stack.pop() {
        let v = match entry {
            Entry::Leave(v) => {
                order.push(v);
                continue;
            }
            Entry::Enter(v) => v,
        };
        if visited[v] {
            continue;
        }
        visited[v] = true;
        stack.push(Entry::Leave(v));
        sorted_inputs.clear();
        sorted_inputs.extend(nodes[v].inputs.iter().flatten().copied());
        sorted_inputs.sort_unstable(); // std::sort(…, NodeCompare): ascending index
        for &p in &sorted_inputs {
            if !visited[p] {
                stack.push(Entry::Enter(p));
            }
        }
    }

    // A cycle either hides nodes from every leaf or yields a non-topological order.
    let mut position = vec![usize::MAX; n];
    for (step, &v) in order.iter().enumerate() {
        position[v] = step;
    }
    if let Some(node) = (0..n).find(|&v| position[v] == usize::MAX) {
        return Err(ScheduleError::Cycle { node });
    }
    for (v, on) in nodes.iter().enumerate() {
        if on
            .inputs
            .iter()
            .flatten()
            .any(|&p| position[p] >= position[v])
        {
            return Err(ScheduleError::Cycle { node: v });
        }
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(spec: &[&[Option<usize>]]) -> Vec<OrderNode> {
        spec.iter()
            .map(|ins| OrderNode::new(ins.iter().copied()))
            .collect()
    }
    const X: Option<usize> = None; // graph input / initializer

    fn ort_default_order(nodes: &[OrderNode]) -> Vec<usize> {
        try_ort_default_order(nodes).expect("an acyclic table with producers in range")
    }

    // Every expected order below is what ORT 1.31.1 (CPU EP, levels disable and basic)
    // executed, read from its profile: scripts/ort_probe/hand_cases.py.

    #[test]
    fn chain_in_file_order() {
        // Relu(x)->a, Neg(a)->b, Abs(b)->c
        assert_eq!(
            ort_default_order(&g(&[&[X], &[Some(0)], &[Some(1)]])),
            vec![0, 1, 2]
        );
    }

    #[test]
    fn chain_written_backwards() {
        // Abs(b)->c, Neg(a)->b, Relu(x)->a
        assert_eq!(
            ort_default_order(&g(&[&[Some(1)], &[Some(2)], &[X]])),
            vec![2, 1, 0]
        );
    }

    #[test]
    fn diamond_expands_higher_index_input_first() {
        // Relu(x)->a, Neg(a)->b, Abs(a)->c, Add(b,c)->d: c's branch (index 2) runs before b's
        let nodes = g(&[&[X], &[Some(0)], &[Some(0)], &[Some(1), Some(2)]]);
        assert_eq!(ort_default_order(&nodes), vec![0, 2, 1, 3]);
        // slot order does not matter, only indices: Add(c,b)
        let swapped = g(&[&[X], &[Some(0)], &[Some(0)], &[Some(2), Some(1)]]);
        assert_eq!(ort_default_order(&swapped), vec![0, 2, 1, 3]);
    }

    #[test]
    fn independent_leaves_run_highest_index_first() {
        // Relu(x)->a, Neg(x)->b, both graph outputs
        assert_eq!(ort_default_order(&g(&[&[X], &[X]])), vec![1, 0]);
    }

    #[test]
    fn consumed_graph_output_is_not_a_leaf_and_dead_nodes_run() {
        // Relu(x)->a [output], Neg(a)->b [output], Sigmoid(x)->dead, Abs(x)->c [output]
        let nodes = g(&[&[X], &[Some(0)], &[X], &[X]]);
        assert_eq!(ort_default_order(&nodes), vec![3, 2, 0, 1]);
    }

    #[test]
    fn forward_and_backward_interleaved_in_file() {
        // 0: Mul(g1,a)->g2  1: Relu(x)->a  2: Mul(loss,h)->g1  3: Tanh(a)->h  4: Neg(h)->loss
        let nodes = g(&[
            &[Some(2), Some(1)],
            &[X],
            &[Some(4), Some(3)],
            &[Some(1)],
            &[Some(3)],
        ]);
        assert_eq!(ort_default_order(&nodes), vec![1, 3, 4, 2, 0]);
    }

    #[test]
    fn repeated_producer_and_skip_connection() {
        // 0 Relu(x)->a 1 Mul(a,a)->b 2 Neg(b)->c 3 Abs(c)->d 4 Add(a,d)->e 5 Sigmoid(b)->f 6 Add(e,f)->g
        let nodes = g(&[
            &[X],
            &[Some(0), Some(0)],
            &[Some(1)],
            &[Some(2)],
            &[Some(0), Some(3)],
            &[Some(1)],
            &[Some(4), Some(5)],
        ]);
        assert_eq!(ort_default_order(&nodes), vec![0, 1, 5, 2, 3, 4, 6]);
    }

    #[test]
    fn empty_graph() {
        assert_eq!(ort_default_order(&[]), Vec::<usize>::new());
    }

    #[test]
    fn errors() {
        assert_eq!(
            try_ort_default_order(&g(&[&[Some(3)]])),
            Err(ScheduleError::ProducerOutOfRange {
                node: 0,
                producer: 3
            })
        );
        // 0 <-> 1 cycle, nothing reaches it from a leaf
        assert!(matches!(
            try_ort_default_order(&g(&[&[Some(1)], &[Some(0)]])),
            Err(ScheduleError::Cycle { .. })
        ));
        // cycle 1 <-> 2 below leaf 0
        assert!(matches!(
            try_ort_default_order(&g(&[&[Some(1)], &[Some(2)], &[Some(1)]])),
            Err(ScheduleError::Cycle { .. })
        ));
    }

    /// Replays ORT profiles of random DAGs recorded by scripts/ort_probe/random_dags.py.
    #[test]
    fn matches_recorded_ort_profiles() {
        let text = include_str!("../../scripts/ort_probe/ort_profiled_cases.txt");
        let mut checked = 0;
        for (lineno, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (graph, order) = line.split_once(" | ").expect("graph | order");
            let nodes: Vec<OrderNode> = graph
                .split(' ')
                .map(|node| {
                    if node == "." {
                        return OrderNode::default();
                    }
                    OrderNode::new(node.split(',').map(|p| {
                        if p == "_" {
                            None
                        } else {
                            Some(p.parse().unwrap())
                        }
                    }))
                })
                .collect();
            let expected: Vec<usize> = order.split(',').map(|v| v.parse().unwrap()).collect();
            assert_eq!(
                ort_default_order(&nodes),
                expected,
                "case on line {}",
                lineno + 1
            );
            checked += 1;
        }
        assert!(checked >= 300, "only {checked} recorded cases");
    }
}
