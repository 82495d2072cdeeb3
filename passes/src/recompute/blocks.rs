//! Block checkpointing at the graph's own block boundaries: the residual stream (the values
//! a forward `Add` reads beside something computed from them) and the plan that keeps each
//! block's input and rebuilds the block once in backward.

use std::collections::{BTreeMap, BTreeSet};

use ckpt_ir::{Graph, TensorId};

use super::Candidates;
use crate::memory::Simulation;

/// Forward values that enter a residual block: `x` where a forward `Add` reads `x` and a value
/// computed from `x` (`x + f(x)`, a transformer sublayer's or a residual block's shortcut),
/// found within a few hundred values back (a block is a few dozen nodes).
pub fn residual_stream(graph: &Graph, class: &crate::Classification) -> BTreeSet<TensorId> {
    use crate::Phase;
    const ANCESTOR_LIMIT: usize = 400;
    let is_ancestor = |x: TensorId, y: TensorId| -> bool {
        let mut stack = vec![y];
        let mut seen = BTreeSet::new();
        while let Some(t) = stack.pop() {
            if t == x {
                return true;
            }
            if !seen.insert(t) || seen.len() > ANCESTOR_LIMIT {
                continue;
            }
            if let Some(p) = graph.tensor(t).producer() {
                if class.phase(p) == Phase::Forward {
                    stack.extend(graph.node(p).input_tensors());
                }
            }
        }
        false
    };
    let mut out = BTreeSet::new();
    for &n in graph.nodes() {
        let node = graph.node(n);
        if node.op_type != "Add"
            || node.domain != ckpt_ir::ONNX_DOMAIN
            || class.phase(n) != Phase::Forward
        {
            continue;
        }
        let &[Some(x), Some(y)] = node.inputs.as_slice() else {
            continue;
        };
        if graph.tensor(x).producer().is_none() || graph.tensor(y).producer().is_none() {
            continue;
        }
        if is_ancestor(x, y) {
            out.insert(x);
        } else if is_ancestor(y, x) {
            out.insert(y);
        }
    }
    out
}

/// How coarse a block of [`per_block`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Granularity {
    /// Every residual-stream value is a checkpoint: a transformer's sublayer (attention, MLP),
    /// a ResNet's residual block.
    Sublayer,
    /// Every other one, from the first: a transformer layer's input (attention and MLP
    /// recomputed together, as `gradient_checkpointing_enable()` does).
    Layer,
}

/// Block checkpointing as a plan of the candidates: which are recomputed, and the step each is
/// rebuilt at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerBlock {
    /// `recompute[i]` for every candidate.
    pub recompute: Vec<bool>,
    /// The rebuild step of each recomputed candidate: the first backward read of any value of
    /// its block, the same for the whole block, so that the rewrite builds one shared copy of
    /// the block's forward (clones are shared among candidates rebuilt at one step).
    pub remat_at: Vec<Option<usize>>,
    /// How many blocks are recomputed.
    pub blocks: usize,
}

/// Block checkpointing at the graph's own block boundaries ([`residual_stream`]): keep each
/// block's input, and in backward rebuild the block's forward once, just before its first
/// backward reader, for the backward readers only. Kept as they are: what is saved before the
/// first checkpoint (embeddings, masks), after the last residual `Add` (the final norm, the
/// head and the loss), and every candidate whose gap does not end in backward (a forward
/// reader keeps its value). `None` when the graph has no residual stream.
pub fn per_block(
    graph: &Graph,
    class: &crate::Classification,
    sim: &Simulation,
    cands: &Candidates,
    granularity: Granularity,
) -> Option<PerBlock> {
    use crate::Phase;
    let sched = &sim.schedule;
    let step_of_value = |t: TensorId| graph.tensor(t).producer().and_then(|p| sched.step_of(p));
    let stream = residual_stream(graph, class);
    let mut stream_steps: Vec<(usize, TensorId)> = stream
        .iter()
        .filter_map(|&t| step_of_value(t).map(|s| (s, t)))
        .collect();
    stream_steps.sort_unstable();
    if stream_steps.is_empty() {
        return None;
    }
    // The residual stream ends at the last forward Add that reads a stream value.
    let end = stream
        .iter()
        .flat_map(|&x| graph.tensor(x).consumers().iter().copied())
        .filter(|&r| {
            let node = graph.node(r);
            node.op_type == "Add"
                && node.domain == ckpt_ir::ONNX_DOMAIN
                && class.phase(r) == Phase::Forward
        })
        .filter_map(|r| sched.step_of(r))
        .max()?;
    let step = match granularity {
        Granularity::Sublayer => 1,
        Granularity::Layer => 2,
    };
    let checkpoints: Vec<(usize, TensorId)> = stream_steps.iter().copied().step_by(step).collect();
    let kept_values: BTreeSet<TensorId> = checkpoints.iter().map(|&(_, t)| t).collect();
    let n = cands.list.len();
    let mut recompute = vec![false; n];
    let mut block: Vec<Option<usize>> = vec![None; n];
    for (i, c) in cands.list.iter().enumerate() {
        let Some(made) = c.saved.iter().filter_map(|&t| step_of_value(t)).min() else {
            continue;
        };
        let in_backward = sched
            .order
            .get(c.model.needed_at)
            .is_some_and(|&r| class.phase(r) == Phase::Backward);
        if made < checkpoints[0].0
            || made > end
            || !in_backward
            || c.saved.iter().any(|t| kept_values.contains(t))
        {
            continue;
        }
        recompute[i] = true;
        block[i] = Some(checkpoints.iter().filter(|&&(s, _)| s <= made).count() - 1);
    }
    // One rebuild step per block; a dependency rebuilt in another block is rebuilt with its
    // dependent's block (merged) so that no block is built twice.
    let mut at: BTreeMap<usize, usize> = BTreeMap::new();
    for (c, b) in cands.list.iter().zip(&block) {
        if let Some(b) = *b {
            let e = at.entry(b).or_insert(usize::MAX);
            *e = (*e).min(c.model.needed_at);
        }
    }
    loop {
        let mut changed = false;
        for i in 0..n {
            let Some(bi) = block[i] else { continue };
            for &d in &cands.list[i].model.deps {
                let Some(bd) = block.get(d).copied().flatten() else {
                    continue;
                };
                if at[&bd] > at[&bi] {
                    let v = at[&bi];
                    at.insert(bd, v);
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    let remat_at = block.iter().map(|b| b.map(|b| at[&b])).collect();
    Some(PerBlock {
        recompute,
        remat_at,
        blocks: at.len(),
    })
}
