//! Backward-only terms (backward nodes that read forward values only) and the zero-FLOP
//! moves that place each right after the producers of its inputs, so that ORT runs it just
//! before its consumer instead of during the forward pass.

use std::collections::{BTreeMap, BTreeSet};

use ckpt_ir::{Graph, Move, NodeId, Patch};

/// Backward-only terms: backward nodes that read forward values only (directly or through other
/// such terms), in file order. ORT's order runs such a node as soon as a consumer expands it,
/// which is during the forward pass when its index is above its consumer's gradient input;
/// its output then waits idle until backward.
pub fn backward_only_terms(graph: &Graph, class: &crate::Classification) -> Vec<NodeId> {
    use crate::Phase;
    let mut term = vec![false; graph.node_bound()];
    let mut out = Vec::new();
    for &n in graph.nodes() {
        if class.phase(n) != Phase::Backward {
            continue;
        }
        let mut any = false;
        let all = graph.node(n).input_tensors().all(|u| {
            let Some(p) = graph.tensor(u).producer() else {
                return true;
            };
            let ok = matches!(class.phase(p), Phase::Forward | Phase::Loss) || term[p.index()];
            any |= ok;
            ok
        });
        if all && any {
            term[n.index()] = true;
            out.push(n);
        }
    }
    out
}

/// Zero-FLOP moves that place each of `terms` (in file order, each one's producers before it)
/// right after the producers of its inputs: the lowest index the file allows, so that ORT
/// expands it after its consumer's other inputs and runs it just before that consumer.
pub fn lower_terms(graph: &Graph, terms: &[NodeId], label: &str) -> Patch {
    let mut patch = Patch::new(label);
    let pos = graph.file_positions();
    let order = graph.nodes();
    let is_term: BTreeSet<NodeId> = terms.iter().copied().collect();
    // Where a placed term sits: just before the anchor at this file position.
    let mut anchored_at: BTreeMap<NodeId, usize> = BTreeMap::new();
    for &n in terms {
        let lower = graph
            .node(n)
            .input_tensors()
            .filter_map(|u| graph.tensor(u).producer())
            .map(|p| match anchored_at.get(&p) {
                Some(&a) => a,
                None => pos[p.index()] + 1,
            })
            .max()
            .unwrap_or(0);
        let Some(anchor) = order[lower.min(order.len())..]
            .iter()
            .copied()
            .find(|m| !is_term.contains(m))
        else {
            continue;
        };
        if pos[anchor.index()] >= pos[n.index()] {
            continue;
        }
        anchored_at.insert(n, pos[anchor.index()]);
        patch.moves.push(Move::reorder(graph, n, anchor));
    }
    patch
}
