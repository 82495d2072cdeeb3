//! Zero-FLOP order moves: file positions chosen so that ONNX Runtime's execution order frees
//! memory sooner (ORT's order follows the file, see [`crate::schedule`]).
//!
//! **Leaf order.** ORT's walk starts from the leaves (nodes nothing reads: the loss, each
//! parameter's gradient), highest index first, and runs the whole ancestry of each before the
//! next. A PyTorch export writes the gradient nodes in backward order, so the deepest layer's
//! weight gradient has the highest index: ORT runs the whole input-gradient chain first, down
//! to the first layer, and every layer's weight gradient after it — each holding its layer's
//! activation and output gradient to the end of the backward pass. Writing the leaves in the
//! reverse order of when their inputs become ready makes ORT run each weight gradient as
//! soon as it can, and free what it reads.

use std::collections::BTreeSet;

use ckpt_ir::{Graph, Move, NodeId, Patch};

use crate::memory::Schedule;

/// The leaves of `graph` (nodes none of whose outputs another node reads), each with the step
/// of `schedule` at which it becomes ready: the latest step among the producers its *tail*
/// reads from outside. A leaf's tail is the leaf and every producer all of whose readers are
/// in the tail (what only this leaf needs, which ORT runs just before it). Nodes not in the
/// schedule (`Constant` nodes) are skipped.
pub fn leaf_readiness(graph: &Graph, schedule: &Schedule) -> Vec<(NodeId, usize)> {
    let readers_in = |p: NodeId, set: &BTreeSet<NodeId>| {
        graph
            .node(p)
            .output_tensors()
            .all(|t| graph.tensor(t).consumers().iter().all(|c| set.contains(c)))
    };
    let mut out = Vec::new();
    for &leaf in graph.nodes() {
        if !is_leaf(graph, schedule, leaf) {
            continue;
        }
        let mut tail: BTreeSet<NodeId> = BTreeSet::from([leaf]);
        let mut work = vec![leaf];
        while let Some(n) = work.pop() {
            for u in graph.node(n).input_tensors() {
                let Some(p) = graph.tensor(u).producer() else {
                    continue;
                };
                if schedule.step_of(p).is_some() && !tail.contains(&p) && readers_in(p, &tail) {
                    tail.insert(p);
                    work.push(p);
                }
            }
        }
        let ready = tail
            .iter()
            .flat_map(|&n| graph.node(n).input_tensors())
            .filter_map(|u| graph.tensor(u).producer())
            .filter(|p| !tail.contains(p))
            .filter_map(|p| schedule.step_of(p))
            .max()
            .unwrap_or(0);
        out.push((leaf, ready));
    }
    out
}

/// Moves that write every leaf at the end of the file, the latest-ready first and the
/// earliest-ready last (the highest index, which ORT expands first); ties keep file order.
/// Only leaves move, and nothing reads a leaf, so the file stays topological and no other
/// node's index changes relative to another's. Empty when the leaves are in that order already.
pub fn order_leaves(graph: &Graph, schedule: &Schedule, label: &str) -> Patch {
    let current = leaves_in_file_order(graph, schedule);
    let Some(&last) = graph.nodes().last() else {
        return Patch::new(label);
    };
    if current.len() < 2 || !current.contains(&last) {
        return Patch::new(label); // the file's last node is a leaf in a topological file
    }
    let wanted = ready_leaf_order(graph, schedule);
    let at_end = &graph.nodes()[graph.nodes().len() - current.len()..];
    if wanted == current && at_end == current.as_slice() {
        return Patch::new(label);
    }
    leaf_order(graph, &wanted, label)
}

/// The leaves of `graph` (nodes none of whose outputs another node reads, as
/// [`leaf_readiness`] finds them, without their tails) in file order: where a search over
/// leaf orders starts.
pub fn leaves_in_file_order(graph: &Graph, schedule: &Schedule) -> Vec<NodeId> {
    graph
        .nodes()
        .iter()
        .copied()
        .filter(|&n| is_leaf(graph, schedule, n))
        .collect()
}

/// Whether `n` is a leaf: scheduled (not a `Constant` node), and no node reads its outputs.
fn is_leaf(graph: &Graph, schedule: &Schedule, n: NodeId) -> bool {
    schedule.step_of(n).is_some()
        && graph
            .node(n)
            .output_tensors()
            .all(|t| graph.tensor(t).consumers().is_empty())
}

/// The leaves [`order_leaves`] writes, in the order it writes them.
pub fn ready_leaf_order(graph: &Graph, schedule: &Schedule) -> Vec<NodeId> {
    let pos = graph.file_positions();
    let mut leaves = leaf_readiness(graph, schedule);
    leaves.sort_by_key(|&(n, ready)| (std::cmp::Reverse(ready), pos[n.index()]));
    leaves.into_iter().map(|(n, _)| n).collect()
}

/// Moves that write `leaves` (nodes nothing reads, the file's last node among them) at the
/// end of the file in the order given, every other node keeping its place: the file
/// [`sequence_with_leaves`] lists. Only leaves move, so the file stays topological. Empty
/// when `leaves` does not hold the file's last node (a leaf in a topological file).
pub fn leaf_order(graph: &Graph, leaves: &[NodeId], label: &str) -> Patch {
    let mut patch = Patch::new(label);
    let Some(&last) = graph.nodes().last() else {
        return patch;
    };
    if !leaves.contains(&last) {
        return patch;
    }
    for &n in leaves {
        patch.moves.push(Move::reorder(graph, n, last));
    }
    patch
}

/// The file order [`leaf_order`]`(graph, leaves)` writes: every other node in file order, then
/// `leaves`.
pub fn sequence_with_leaves(graph: &Graph, leaves: &[NodeId]) -> Vec<NodeId> {
    let mut moved = vec![false; graph.node_bound()];
    for &n in leaves {
        moved[n.index()] = true;
    }
    let mut seq: Vec<NodeId> = graph
        .nodes()
        .iter()
        .copied()
        .filter(|n| !moved[n.index()])
        .collect();
    seq.extend_from_slice(leaves);
    seq
}
