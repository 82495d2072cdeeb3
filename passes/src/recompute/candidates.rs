//! Finding candidates: each droppable buffer's longest idle gap, the chain that rebuilds
//! its values (grown to a fixpoint across candidates that read each other's values), what
//! the chain costs and which of its nodes are moved rather than cloned. A chain that reaches
//! an op whose policy is not `Recomputable` excludes its candidate, with the reason; so does
//! a chain of more than [`MAX_CHAIN_NODES`] nodes, and a dependency cycle between candidates.
//! Each walk is bounded by that cap, so finding the candidates is linear in the graph for a
//! bounded number of gaps.

use std::collections::{BTreeMap, BTreeSet};

use ckpt_ir::ops::{flops, policy, Types};
use ckpt_ir::{Bindings, Graph, NodeId, TensorId, TensorSource};
use ckpt_solver::Candidate as SolverCandidate;

use crate::memory::{rounded, Simulation};

/// One droppable buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The buffer in the simulation.
    pub buffer: usize,
    /// The values live across the gap (the activations dropped), in schedule order.
    pub saved: Vec<TensorId>,
    /// Values the recompute rebuilds, in file order.
    pub values: Vec<TensorId>,
    /// Nodes to rebuild, in file order.
    pub nodes: Vec<NodeId>,
    /// The part of `nodes` that nothing but this recompute reads (their outputs are read only
    /// after the gap or by each other): those are moved, not cloned — they run once, later,
    /// and add no FLOPs (a clone would leave the original without readers, and ORT holds an
    /// unread output to the end of the run).
    pub moved: Vec<NodeId>,
    /// Readers (node, input slot, value) after the gap: rewired to the clones.
    pub rewire: Vec<(NodeId, usize, TensorId)>,
    /// What the solver sees of it: bytes, recompute FLOPs, the window it may be absent
    /// (`free_from..needed_at`), the candidates its recompute reads, the transient bytes of
    /// rebuilt values outside this buffer; labelled with its first saved value's name.
    pub model: SolverCandidate,
}

/// The most nodes one recompute re-runs: a longer chain (re-running a long stretch of the
/// step to save one buffer) excludes its candidate.
pub const MAX_CHAIN_NODES: usize = 4096;

/// An activation that may not be recomputed, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Excluded {
    pub tensor: TensorId,
    pub node: NodeId,
    pub op: String,
    pub reason: String,
}

/// Candidates and exclusions of a simulated graph.
#[derive(Clone, Debug, Default)]
pub struct Candidates {
    pub list: Vec<Candidate>,
    pub excluded: Vec<Excluded>,
}

/// The longest idle stretch of a buffer: a gap between consecutive uses (production or read)
/// of its values that some value lives across. Returns (gap start step, gap end step, the
/// values live across it).
fn idle_gap(
    graph: &Graph,
    sim: &Simulation,
    buf: &crate::memory::Buffer,
) -> Option<(usize, usize, Vec<TensorId>)> {
    let sched = &sim.schedule;
    let mut spans: Vec<(TensorId, usize, Vec<usize>)> = Vec::new(); // value, production step, read steps
    let mut events: Vec<usize> = Vec::new();
    for &v in &buf.values {
        let p = sched.step_of(graph.tensor(v).producer()?)?;
        let mut reads: Vec<usize> = graph
            .tensor(v)
            .consumers()
            .iter()
            .filter_map(|&c| sched.step_of(c))
            .collect();
        reads.sort_unstable();
        events.push(p);
        events.extend(&reads);
        spans.push((v, p, reads));
    }
    events.sort_unstable();
    events.dedup();
    let mut best: Option<(usize, usize, Vec<TensorId>)> = None;
    for w in events.windows(2) {
        let (a, b) = (w[0], w[1]);
        if b <= a + 1 || best.as_ref().is_some_and(|x| x.1 - x.0 >= b - a) {
            continue;
        }
        let across: Vec<TensorId> = spans
            .iter()
            .filter(|(_, p, reads)| *p <= a && reads.iter().any(|&r| r >= b))
            .map(|(v, _, _)| *v)
            .collect();
        if !across.is_empty() {
            best = Some((a, b, across));
        }
    }
    best
}
/// Find candidates: buffers whose values sit idle across a stretch of the schedule (the
/// forward-to-backward gap of saved activations above all, whatever phase computed them),
/// with their recompute chains.
pub fn candidates(graph: &Graph, sim: &Simulation, types: &Types, b: &Bindings) -> Candidates {
    let gaps = find_gaps(graph, sim);
    let chains = grow_chains(graph, sim, &gaps);
    let mut out = assemble(graph, sim, types, b, &gaps, &chains);
    drop_dependency_cycles(graph, &mut out);
    out
}

/// A buffer whose values sit idle from step `a` to step `b`, and the values live across.
struct Gap {
    buffer: usize,
    a: usize,
    b: usize,
    across: Vec<TensorId>,
}

/// The droppable buffers' idle gaps, and the gap each value live across one belongs to.
struct Gaps {
    list: Vec<Gap>,
    of_value: BTreeMap<TensorId, usize>,
}

/// The recompute chains of the gaps, grown to a fixpoint (indexed like the gaps).
struct Chains {
    /// The values each recompute rebuilds from: those live across its gap, and those a
    /// dependent's recompute reads from its buffer.
    starts: Vec<BTreeSet<TensorId>>,
    /// Gaps whose chain reaches an op that may not be recomputed, and the first such op.
    excluded: BTreeMap<usize, Excluded>,
    /// The nodes each chain re-runs and the gaps whose values it reads.
    closures: Vec<(BTreeSet<NodeId>, BTreeSet<usize>)>,
}

/// The buffers that may be dropped (freed before the end, holding no graph output) and their
/// longest idle gaps.
fn find_gaps(graph: &Graph, sim: &Simulation) -> Gaps {
    let mut gaps: Vec<Gap> = Vec::new();
    let mut cand_of_value: BTreeMap<TensorId, usize> = BTreeMap::new();
    for (bi, buf) in sim.buffers.iter().enumerate() {
        if buf.free_after.is_none() || buf.values.iter().any(|&v| graph.tensor(v).is_output) {
            continue;
        }
        let Some((a, bstep, across)) = idle_gap(graph, sim, buf) else {
            continue;
        };
        for &v in &across {
            cand_of_value.insert(v, gaps.len());
        }
        gaps.push(Gap {
            buffer: bi,
            a,
            b: bstep,
            across,
        });
    }
    Gaps {
        list: gaps,
        of_value: cand_of_value,
    }
}

/// Every gap's chain, walked again while one grows: a chain that reads another candidate's
/// value adds it to that candidate's starts, and a chain that reaches a kept op excludes its
/// candidate (whose values then count as always there for the others).
fn grow_chains(graph: &Graph, sim: &Simulation, gaps: &Gaps) -> Chains {
    let n = gaps.list.len();
    let mut chains = Chains {
        starts: gaps
            .list
            .iter()
            .map(|g| g.across.iter().copied().collect())
            .collect(),
        excluded: BTreeMap::new(),
        closures: vec![Default::default(); n],
    };
    loop {
        let mut grew = false;
        for c in 0..n {
            if chains.excluded.contains_key(&c) {
                continue;
            }
            let walked = walk_chain(
                graph,
                sim,
                gaps,
                c,
                &mut chains.starts,
                &chains.excluded,
                &mut grew,
            );
            match walked {
                Err(e) => {
                    chains.excluded.insert(c, e);
                    grew = true;
                }
                Ok(closure) => chains.closures[c] = closure,
            }
        }
        if !grew {
            break;
        }
    }
    chains
}

/// The chain of gap `c`: the producers of its starts and, transitively, of every input that
/// is not there at the rematerialisation step (inputs, initializers, outputs and values read
/// later anyway are; a value of another candidate's buffer is its dependency, added to that
/// candidate's starts, setting `grew` when new). The nodes and the dependencies, or the
/// first op on the way that may not be recomputed.
fn walk_chain(
    graph: &Graph,
    sim: &Simulation,
    gaps: &Gaps,
    c: usize,
    starts: &mut [BTreeSet<TensorId>],
    excluded: &BTreeMap<usize, Excluded>,
    grew: &mut bool,
) -> Result<(BTreeSet<NodeId>, BTreeSet<usize>), Excluded> {
    let sched = &sim.schedule;
    let at = gaps.list[c].b;
    let mut nodes = BTreeSet::new();
    let mut deps = BTreeSet::new();
    let mut stack: Vec<TensorId> = starts[c].iter().copied().collect();
    let mut seen: BTreeSet<TensorId> = stack.iter().copied().collect();
    while let Some(v) = stack.pop() {
        let Some(p) = graph.tensor(v).producer() else {
            continue;
        };
        let pol = policy(graph, p);
        if !pol.is_recomputable() {
            return Err(Excluded {
                tensor: v,
                node: p,
                op: graph.node(p).op_label(),
                reason: pol.reason().to_string(),
            });
        }
        if !nodes.insert(p) {
            continue;
        }
        if nodes.len() > MAX_CHAIN_NODES {
            return Err(Excluded {
                tensor: v,
                node: p,
                op: graph.node(p).op_label(),
                reason: format!("rebuilding it re-runs more than {MAX_CHAIN_NODES} nodes"),
            });
        }
        for u in graph.node(p).input_tensors() {
            if seen.contains(&u) {
                continue;
            }
            let tensor = graph.tensor(u);
            if !matches!(tensor.source, TensorSource::Node(_)) || tensor.is_output {
                continue; // inputs, initializers, outputs: always there
            }
            if tensor
                .producer()
                .is_some_and(|p| sched.step_of(p).is_none())
            {
                continue; // a Constant node's output: an initializer in ORT
            }
            let same_buffer = sim.buffer_of[u.index()] == Some(gaps.list[c].buffer);
            if !same_buffer {
                if let Some(&d) = gaps.of_value.get(&u) {
                    if d != c && !excluded.contains_key(&d) && gaps.list[d].a < at {
                        deps.insert(d);
                        if starts[d].insert(u) {
                            *grew = true;
                        }
                        continue;
                    }
                }
                if last_read(graph, sim, u).is_some_and(|r| r >= at) {
                    continue; // alive at the rematerialisation anyway
                }
            }
            seen.insert(u);
            stack.push(u);
        }
    }
    Ok((nodes, deps))
}

/// The schedule step of `t`'s last reader.
fn last_read(graph: &Graph, sim: &Simulation, t: TensorId) -> Option<usize> {
    graph
        .tensor(t)
        .consumers()
        .iter()
        .filter_map(|&c| sim.schedule.step_of(c))
        .max()
}

/// The candidates of the chains not excluded, in gap order, with their dependencies mapped
/// to final indices (a candidate whose dependency was excluded keeps it); an excluded chain
/// reported once per kept op.
fn assemble(
    graph: &Graph,
    sim: &Simulation,
    types: &Types,
    b: &Bindings,
    gaps: &Gaps,
    chains: &Chains,
) -> Candidates {
    let pos = graph.file_positions();
    let mut out = Candidates::default();
    let mut index_of: BTreeMap<usize, usize> = BTreeMap::new();
    for (c, g) in gaps.list.iter().enumerate() {
        if let Some(e) = chains.excluded.get(&c) {
            // Only report what matters: activations (values read across a gap) a policy keeps.
            if !out.excluded.iter().any(|x| x.node == e.node) {
                out.excluded.push(e.clone());
            }
            continue;
        }
        let buf = &sim.buffers[g.buffer];
        let (nodes, _) = &chains.closures[c];
        let mut node_list: Vec<NodeId> = nodes.iter().copied().collect();
        node_list.sort_by_key(|n| pos[n.index()]);
        let values: Vec<TensorId> = node_list
            .iter()
            .flat_map(|&m| graph.node(m).output_tensors().collect::<Vec<_>>())
            .collect();
        let rewire = late_readers(graph, sim, &chains.starts[c], g);
        let moved = movable(graph, &node_list, &rewire);
        let cost = recompute_cost(graph, sim, types, b, &node_list, &moved);
        let transient: u64 = values
            .iter()
            .filter(|v| sim.buffer_of[v.index()] != Some(g.buffer))
            .map(|v| rounded(sim.tensor_bytes[v.index()]))
            .sum();
        index_of.insert(c, out.list.len());
        out.list.push(Candidate {
            buffer: g.buffer,
            saved: g.across.clone(),
            values,
            nodes: node_list,
            moved,
            rewire,
            model: SolverCandidate {
                label: g
                    .across
                    .first()
                    .map(|&t| graph.tensor(t).name.clone())
                    .unwrap_or_default(),
                bytes: rounded(buf.bytes),
                cost,
                free_from: g.a + 1,
                needed_at: g.b,
                deps: Vec::new(),
                transient,
                block: None,
            },
        });
    }
    // Map dependencies to final indices; a candidate whose dependency was dropped keeps it.
    let finals: Vec<usize> = index_of.keys().copied().collect();
    for c in finals {
        let i = index_of[&c];
        out.list[i].model.deps = chains.closures[c]
            .1
            .iter()
            .filter_map(|d| index_of.get(d).copied())
            .filter(|&d| d != i)
            .collect();
    }
    out
}

/// The readers (node, input slot, value) at or after the gap's end of the starts that live
/// across it: rewired to the clones.
fn late_readers(
    graph: &Graph,
    sim: &Simulation,
    starts: &BTreeSet<TensorId>,
    g: &Gap,
) -> Vec<(NodeId, usize, TensorId)> {
    let sched = &sim.schedule;
    starts
        .iter()
        .filter(|v| g.across.contains(v))
        .flat_map(|&v| {
            graph
                .tensor(v)
                .consumers()
                .iter()
                .filter(|&&r| sched.step_of(r).is_some_and(|s| s >= g.b))
                .flat_map(move |&r| {
                    graph
                        .node(r)
                        .inputs
                        .iter()
                        .enumerate()
                        .filter(move |(_, i)| **i == Some(v))
                        .map(move |(slot, _)| (r, slot, v))
                })
        })
        .collect()
}

/// The FLOPs a chain's clones add (a node without a FLOP rule counts a quarter of its
/// output bytes); at least 1.
fn recompute_cost(
    graph: &Graph,
    sim: &Simulation,
    types: &Types,
    b: &Bindings,
    nodes: &[NodeId],
    moved: &[NodeId],
) -> u64 {
    nodes
        .iter()
        .filter(|m| !moved.contains(m))
        .map(|&m| {
            flops(graph, m, types, b).unwrap_or_else(|_| {
                graph
                    .node(m)
                    .output_tensors()
                    .map(|t| sim.tensor_bytes[t.index()] / 4)
                    .sum()
            })
        })
        .sum::<u64>()
        // a pure move adds nothing; a clone of alias ops alone still runs a node
        .max(1) // a move is nearly free; a zero cost leaves CBC unable to bound the ILP
}

/// The nodes of a chain whose outputs nobody reads except the rewired readers after the gap
/// and other such nodes (greatest fixpoint), in the chain's order. A worklist: a node leaves
/// the set when some reader outside it reads its output, and only the producers of a node
/// that left are looked at again (a chain of 100,000 nodes leaves one node at a time).
fn movable(graph: &Graph, nodes: &[NodeId], rewire: &[(NodeId, usize, TensorId)]) -> Vec<NodeId> {
    let mut set: BTreeSet<NodeId> = nodes.iter().copied().collect();
    let read_outside = |set: &BTreeSet<NodeId>, m: NodeId| {
        graph.node(m).output_tensors().any(|t| {
            let tensor = graph.tensor(t);
            tensor.is_output
                || tensor.consumers().iter().any(|&r| {
                    !set.contains(&r)
                        && graph
                            .node(r)
                            .inputs
                            .iter()
                            .enumerate()
                            .any(|(slot, i)| *i == Some(t) && !rewire.contains(&(r, slot, t)))
                })
        })
    };
    let mut leaving: Vec<NodeId> = set
        .iter()
        .copied()
        .filter(|&m| read_outside(&set, m))
        .collect();
    while let Some(m) = leaving.pop() {
        if !set.remove(&m) {
            continue;
        }
        for t in graph.node(m).input_tensors() {
            if let Some(p) = graph.tensor(t).producer() {
                if set.contains(&p) && read_outside(&set, p) {
                    leaving.push(p);
                }
            }
        }
    }
    nodes.iter().copied().filter(|m| set.contains(m)).collect()
}

/// The first candidate a colour DFS over `deps` reaches by a back edge (one on a cycle), in
/// the order a recursive DFS from candidate 0 upward would find it; walked on an explicit
/// stack.
fn back_edge_target(list: &[Candidate]) -> Option<usize> {
    let mut state = vec![0u8; list.len()];
    for root in 0..list.len() {
        if state[root] != 0 {
            continue;
        }
        state[root] = 1;
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        while let Some((v, next)) = stack.last_mut() {
            let v = *v;
            match list[v].model.deps.get(*next) {
                Some(&d) => {
                    *next += 1;
                    if state[d] == 1 {
                        return Some(d);
                    }
                    if state[d] == 0 {
                        state[d] = 1;
                        stack.push((d, 0));
                    }
                }
                None => {
                    state[v] = 2;
                    stack.pop();
                }
            }
        }
    }
    None
}

/// Buffers reused across a chain can make two candidates need each other's values; such a
/// pair cannot be rebuilt in any order, so every candidate on a cycle is kept (excluded).
fn drop_dependency_cycles(graph: &Graph, out: &mut Candidates) {
    loop {
        let Some(bad) = back_edge_target(&out.list) else {
            return;
        };
        let c = out.list.remove(bad);
        if let Some(&t) = c.saved.first() {
            if let Some(p) = graph.tensor(t).producer() {
                out.excluded.push(Excluded {
                    tensor: t,
                    node: p,
                    op: graph.node(p).op_label(),
                    reason:
                        "its recompute and another's need each other's values (shared buffer): kept"
                            .to_string(),
                });
            }
        }
        for cand in &mut out.list {
            cand.model.deps.retain(|&d| d != bad);
            for d in &mut cand.model.deps {
                if *d > bad {
                    *d -= 1;
                }
            }
        }
    }
}
