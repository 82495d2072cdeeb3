//! Recompute: which activations can be dropped and rebuilt, what that costs, the solver's
//! [`Problem`], and the rewrite of a [`Plan`] into one labelled [`Patch`].
//!
//! A **candidate** is a forward-allocated buffer (see [`crate::memory`]) holding an
//! activation saved for backward. Dropping it frees its bytes from just after its last
//! forward reader to just before its first backward reader. Rebuilding it re-runs the
//! producers of its values and, transitively, of every input that is not kept (a value
//! freed during forward, or in the same buffer); inputs held in another candidate make that
//! candidate a dependency. Ops whose policy is not `Recomputable` (random, stateful,
//! unknown) end a candidate: it is excluded, with the reason.
//!
//! The rewrite clones each recomputed chain (`<name>.recompute`), rewires only backward
//! readers, and places every clone in the file right after the producers of its inputs:
//! ORT expands a node's highest-index input first, so a low-index clone is expanded last and
//! runs right before its first backward reader — not during the forward pass.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::{FxHashMap, FxHashSet};

use ckpt_ir::ops::{flops, policy, Types};
use ckpt_ir::{
    Bindings, Graph, Move, NewNode, NewTensor, NodeId, Patch, Rewire, TensorId, TensorRef,
    TensorSource,
};
use ckpt_solver::{Candidate as SolverCandidate, Plan, Problem};

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
    let sched = &sim.schedule;
    let pos = graph.file_positions();
    let last_read = |t: TensorId| -> Option<usize> {
        graph
            .tensor(t)
            .consumers()
            .iter()
            .filter_map(|&c| sched.step_of(c))
            .max()
    };
    // Candidate buffers and their gaps.
    struct Gap {
        buffer: usize,
        a: usize,
        b: usize,
        across: Vec<TensorId>,
    }
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
    let n = gaps.len();
    let mut starts: Vec<BTreeSet<TensorId>> = gaps
        .iter()
        .map(|g| g.across.iter().copied().collect())
        .collect();
    let mut excluded_map: BTreeMap<usize, Excluded> = BTreeMap::new();
    let mut closures: Vec<(BTreeSet<NodeId>, BTreeSet<usize>)> = vec![Default::default(); n];
    loop {
        let mut grew = false;
        for c in 0..n {
            if excluded_map.contains_key(&c) {
                continue;
            }
            let at = gaps[c].b;
            let mut nodes = BTreeSet::new();
            let mut deps = BTreeSet::new();
            let mut stack: Vec<TensorId> = starts[c].iter().copied().collect();
            let mut seen: BTreeSet<TensorId> = stack.iter().copied().collect();
            let mut bad: Option<Excluded> = None;
            while let Some(v) = stack.pop() {
                let Some(p) = graph.tensor(v).producer() else {
                    continue;
                };
                let pol = policy(graph, p);
                if !pol.is_recomputable() {
                    bad = Some(Excluded {
                        tensor: v,
                        node: p,
                        op: graph.node(p).op_label(),
                        reason: pol.reason().to_string(),
                    });
                    break;
                }
                if !nodes.insert(p) {
                    continue;
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
                    let same_buffer = sim.buffer_of[u.index()] == Some(gaps[c].buffer);
                    if !same_buffer {
                        if let Some(&d) = cand_of_value.get(&u) {
                            if d != c && !excluded_map.contains_key(&d) && gaps[d].a < at {
                                deps.insert(d);
                                if starts[d].insert(u) {
                                    grew = true;
                                }
                                continue;
                            }
                        }
                        if last_read(u).is_some_and(|r| r >= at) {
                            continue; // alive at the rematerialisation anyway
                        }
                    }
                    seen.insert(u);
                    stack.push(u);
                }
            }
            match bad {
                Some(e) => {
                    excluded_map.insert(c, e);
                    grew = true;
                }
                None => closures[c] = (nodes, deps),
            }
        }
        if !grew {
            break;
        }
    }
    let mut out = Candidates::default();
    let mut index_of: BTreeMap<usize, usize> = BTreeMap::new();
    for c in 0..n {
        if let Some(e) = excluded_map.get(&c) {
            // Only report what matters: activations (values read across a gap) a policy keeps.
            if !out.excluded.iter().any(|x| x.node == e.node) {
                out.excluded.push(e.clone());
            }
            continue;
        }
        let g = &gaps[c];
        let buf = &sim.buffers[g.buffer];
        let (nodes, _) = &closures[c];
        let mut node_list: Vec<NodeId> = nodes.iter().copied().collect();
        node_list.sort_by_key(|n| pos[n.index()]);
        let values: Vec<TensorId> = node_list
            .iter()
            .flat_map(|&m| graph.node(m).output_tensors().collect::<Vec<_>>())
            .collect();
        let rewire: Vec<(NodeId, usize, TensorId)> = starts[c]
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
            .collect();
        let moved = movable(graph, &node_list, &rewire);
        let cost: u64 = node_list
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
            .max(1); // a move is nearly free; a zero cost leaves CBC unable to bound the ILP
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
        out.list[i].model.deps = closures[c]
            .1
            .iter()
            .filter_map(|d| index_of.get(d).copied())
            .filter(|&d| d != i)
            .collect();
    }
    drop_dependency_cycles(graph, &mut out);
    out
}

/// The nodes of a chain whose outputs nobody reads except the rewired readers after the gap
/// and other such nodes (greatest fixpoint), in the chain's order.
fn movable(graph: &Graph, nodes: &[NodeId], rewire: &[(NodeId, usize, TensorId)]) -> Vec<NodeId> {
    let mut set: BTreeSet<NodeId> = nodes.iter().copied().collect();
    loop {
        let bad: Vec<NodeId> = set
            .iter()
            .copied()
            .filter(|&m| {
                graph.node(m).output_tensors().any(|t| {
                    let tensor = graph.tensor(t);
                    tensor.is_output
                        || tensor.consumers().iter().any(|&r| {
                            !set.contains(&r)
                                && graph.node(r).inputs.iter().enumerate().any(|(slot, i)| {
                                    *i == Some(t) && !rewire.contains(&(r, slot, t))
                                })
                        })
                })
            })
            .collect();
        if bad.is_empty() {
            return nodes.iter().copied().filter(|m| set.contains(m)).collect();
        }
        for m in bad {
            set.remove(&m);
        }
    }
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

/// The solver's problem: live bytes per step, candidates, and the arena budget.
pub fn problem(sim: &Simulation, cands: &Candidates, arena_ceiling: u64) -> Problem {
    Problem {
        base_live: sim.live.clone(),
        candidates: cands.list.iter().map(|c| c.model.clone()).collect(),
        ceiling: arena_ceiling,
    }
}

/// The names a rewrite has given its clones, and for each base name where its search for a
/// free one goes on.
#[derive(Default)]
struct Names {
    taken: FxHashSet<String>,
    /// The first suffix not yet tried for a base (1 is `.recompute`, `k > 1` is
    /// `.recompute{k}`): every earlier one is taken, and stays taken.
    next: FxHashMap<String, usize>,
}

impl Names {
    /// A free tensor/node name: `base.recompute`, then `base.recompute2`, …, the first that is
    /// neither one of `graph`'s tensors nor given already. A base cloned once per candidate
    /// (recomputing every candidate of a deep graph clones one node hundreds of times) resumes
    /// where its last search stopped, not at `.recompute` again.
    fn fresh(&mut self, graph: &Graph, base: &str) -> String {
        let mut k = self.next.get(base).copied().unwrap_or(1);
        loop {
            let name = if k == 1 {
                format!("{base}.recompute")
            } else {
                format!("{base}.recompute{k}")
            };
            k += 1;
            if graph.tensor_id(&name).is_none() && !self.taken.contains(&name) {
                self.next.insert(base.to_string(), k);
                self.taken.insert(name.clone());
                return name;
            }
        }
    }
}

/// The plan as one patch: clones of every recomputed chain, backward readers rewired.
pub fn rewrite(graph: &Graph, cands: &Candidates, plan: &Plan, label: &str) -> Patch {
    let patch = Patch::new(label);
    let pos = graph.file_positions();
    let order = graph.nodes();
    // Dependencies first: by rematerialisation step, then index.
    let mut by_remat: Vec<usize> = (0..cands.list.len())
        .filter(|&i| plan.recompute.get(i).copied().unwrap_or(false))
        .collect();
    by_remat.sort_by_key(|&i| {
        (
            plan.remat_at
                .get(i)
                .copied()
                .flatten()
                .unwrap_or(usize::MAX),
            i,
        )
    });
    // A dependency's clones must exist before its dependents' clones read them.
    let mut chosen: Vec<usize> = Vec::with_capacity(by_remat.len());
    let mut placed = vec![false; cands.list.len()];
    // Post-order over the chosen dependencies, on an explicit stack (no recursion).
    for &root in &by_remat {
        if placed[root] {
            continue;
        }
        placed[root] = true;
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        while let Some((i, next)) = stack.last_mut() {
            let i = *i;
            let deps = &cands.list[i].model.deps;
            match deps.get(*next) {
                Some(&d) => {
                    *next += 1;
                    if plan.recompute.get(d).copied().unwrap_or(false) && !placed[d] {
                        placed[d] = true;
                        stack.push((d, 0));
                    }
                }
                None => {
                    stack.pop();
                    chosen.push(i);
                }
            }
        }
    }
    let mut rewired: BTreeSet<(NodeId, usize)> = BTreeSet::new();
    // Values some clone or rewire needs; other outputs of cloned nodes are omitted where optional.
    let mut needed: BTreeSet<TensorId> = BTreeSet::new();
    for &i in &chosen {
        let c = &cands.list[i];
        needed.extend(c.rewire.iter().map(|&(_, _, v)| v));
        for &m in &c.nodes {
            needed.extend(graph.node(m).input_tensors());
        }
    }
    // Nodes some chosen recompute moves: they run once, later, under their own names.
    let moved: BTreeSet<NodeId> = chosen
        .iter()
        .flat_map(|&i| cands.list[i].moved.iter().copied())
        .collect();
    // Readers after a gap (node, slot) -> the value they read, and every chosen chain's nodes.
    let late_reads: BTreeMap<(NodeId, usize), TensorId> = chosen
        .iter()
        .flat_map(|&i| {
            cands.list[i]
                .rewire
                .iter()
                .map(|&(r, slot, v)| ((r, slot), v))
        })
        .collect();
    let chain_nodes: BTreeSet<NodeId> = chosen
        .iter()
        .flat_map(|&i| cands.list[i].nodes.iter().copied())
        .collect();
    let mut b = Builder {
        graph,
        pos: &pos,
        order,
        moved: &moved,
        needed: &needed,
        late_reads: &late_reads,
        chain_nodes: &chain_nodes,
        rebuilt: BTreeMap::new(),
        local: BTreeMap::new(),
        names: Names::default(),
        done: BTreeSet::new(),
        local_done: BTreeSet::new(),
        patch,
    };
    let mut group: Option<Option<usize>> = None;
    for &i in &chosen {
        let c = &cands.list[i];
        // Candidates rebuilt at another step get their own clones of the values in between:
        // a clone shared with a later rebuild would run at the first and hold its output
        // to the last (the solver counts each candidate's chain and transient on its own).
        let at = plan.remat_at.get(i).copied().flatten();
        if group != Some(at) {
            group = Some(at);
            b.local.clear();
            b.local_done.clear();
        }
        for &m in &c.nodes {
            b.build(m);
        }
        // What dependents and the rewired readers read: the saved values' rebuilt copies.
        for &v in &c.saved {
            if let Some(&r) = b.local.get(&v) {
                b.rebuilt.insert(v, r);
            }
        }
        // Rewire the readers after the gap (to the clones; a moved value keeps its readers).
        for &(r, slot, v) in &c.rewire {
            let Some(&(to, _)) = b.rebuilt.get(&v) else {
                continue;
            };
            // A moved reader got its inputs with its move.
            if to != TensorRef::Existing(v) && !moved.contains(&r) && rewired.insert((r, slot)) {
                b.patch.rewires.push(Rewire {
                    node: r,
                    slot,
                    from: v,
                    to,
                });
            }
        }
    }
    drop_unread_optional_outputs(graph, b.patch)
}

/// Omit the optional outputs of clones that nothing reads. Whether a value is needed is first
/// decided over the whole plan (another rebuild step may read it); a clone belongs to one
/// rebuild step, so its copy of an output read only elsewhere is unread, and ORT would hold
/// it to the end of the run.
fn drop_unread_optional_outputs(graph: &Graph, mut patch: Patch) -> Patch {
    let mut read: BTreeSet<usize> = BTreeSet::new();
    let mut note = |r: &Option<TensorRef>| {
        if let Some(TensorRef::New(i)) = r {
            read.insert(*i);
        }
    };
    for n in &patch.nodes {
        n.inputs.iter().for_each(&mut note);
    }
    for m in &patch.moves {
        m.inputs.iter().for_each(&mut note);
    }
    for r in &patch.rewires {
        note(&Some(r.to));
    }
    for n in &mut patch.nodes {
        if !ckpt_ir::ops::optional_tail(graph, n.copy_of) {
            continue;
        }
        for o in n.outputs.iter_mut().skip(1) {
            if matches!(o, Some(TensorRef::New(i)) if !read.contains(i)) {
                *o = None;
            }
        }
    }
    // Keep the tensors some node still produces, renumbered in order.
    let produced: BTreeSet<usize> = patch
        .nodes
        .iter()
        .flat_map(|n| n.outputs.iter())
        .filter_map(|o| match o {
            Some(TensorRef::New(i)) => Some(*i),
            _ => None,
        })
        .collect();
    let mut renumber: BTreeMap<usize, usize> = BTreeMap::new();
    let tensors = std::mem::take(&mut patch.tensors);
    for (i, t) in tensors.into_iter().enumerate() {
        if produced.contains(&i) {
            renumber.insert(i, patch.tensors.len());
            patch.tensors.push(t);
        }
    }
    let remap = |r: &mut TensorRef| {
        if let TensorRef::New(i) = r {
            *i = renumber[i];
        }
    };
    for n in &mut patch.nodes {
        n.inputs
            .iter_mut()
            .chain(n.outputs.iter_mut())
            .flatten()
            .for_each(remap);
    }
    for m in &mut patch.moves {
        m.inputs.iter_mut().flatten().for_each(remap);
    }
    for r in &mut patch.rewires {
        remap(&mut r.to);
    }
    patch
}

/// Builds the clones and moves of one rewrite.
struct Builder<'a> {
    graph: &'a Graph,
    pos: &'a [usize],
    order: &'a [NodeId],
    moved: &'a BTreeSet<NodeId>,
    /// Values some clone or rewire reads: other outputs of cloned nodes are omitted where optional.
    needed: &'a BTreeSet<TensorId>,
    /// Readers after a gap (node, slot) -> the value they read (rewired to its rebuilt copy).
    late_reads: &'a BTreeMap<(NodeId, usize), TensorId>,
    /// Nodes of the chosen chains.
    chain_nodes: &'a BTreeSet<NodeId>,
    /// Original value -> what its late readers use now, and the file position its producer
    /// follows: moved nodes' outputs and the saved values of the candidates built so far.
    rebuilt: BTreeMap<TensorId, (TensorRef, usize)>,
    /// The same for the clones of the rebuild step in progress (cleared between steps).
    local: BTreeMap<TensorId, (TensorRef, usize)>,
    names: Names,
    /// Nodes moved.
    done: BTreeSet<NodeId>,
    /// Nodes cloned for the rebuild step in progress.
    local_done: BTreeSet<NodeId>,
    patch: Patch,
}

impl Builder<'_> {
    /// What a rebuilt node reads for `u`: this step's clone, else a moved or earlier-rebuilt copy.
    fn lookup(&self, u: TensorId) -> Option<(TensorRef, usize)> {
        self.local.get(&u).or_else(|| self.rebuilt.get(&u)).copied()
    }

    /// Clone or move `root` (once), after any moved producer of its inputs: a depth-first
    /// walk on an explicit stack, so a chain of any length is rebuilt without recursion.
    fn build(&mut self, root: NodeId) {
        if !self.claim(root) {
            return; // already rebuilt for another candidate
        }
        let mut stack: Vec<(NodeId, usize)> = vec![(root, 0)];
        while let Some((m, slot)) = stack.last_mut() {
            let m = *m;
            match self.next_to_build(m, slot) {
                Some(p) => {
                    if self.claim(p) {
                        stack.push((p, 0));
                    }
                }
                None => {
                    stack.pop();
                    self.emit(m);
                }
            }
        }
    }

    /// Mark `m` as rebuilt; false when it already was.
    fn claim(&mut self, m: NodeId) -> bool {
        if self.moved.contains(&m) {
            self.done.insert(m)
        } else {
            self.local_done.insert(m)
        }
    }

    /// The producer of `m`'s input at `*slot` or later that must be rebuilt before `m`,
    /// advancing `*slot` past it.
    fn next_to_build(&self, m: NodeId, slot: &mut usize) -> Option<NodeId> {
        let graph = self.graph;
        let node = graph.node(m);
        let is_moved = self.moved.contains(&m);
        while *slot < node.inputs.len() {
            let s = *slot;
            *slot += 1;
            let Some(u) = node.inputs[s] else { continue };
            let Some(p) = graph.tensor(u).producer() else {
                continue;
            };
            if p == m || self.lookup(u).is_some() {
                continue;
            }
            // A moved producer's place in the file is decided first; so is the rebuilt copy a
            // moved node reads after a gap (a move takes its inputs with it).
            let late = is_moved
                && self.late_reads.get(&(m, s)) == Some(&u)
                && self.chain_nodes.contains(&p);
            if self.moved.contains(&p) || late {
                return Some(p);
            }
        }
        None
    }

    /// Add `m`'s clone (or move) to the patch, its inputs' producers already rebuilt.
    fn emit(&mut self, m: NodeId) {
        let graph = self.graph;
        let node = graph.node(m);
        let is_moved = self.moved.contains(&m);
        let mut after = 0usize; // file position the node must follow
        let inputs: Vec<Option<TensorRef>> = node
            .inputs
            .iter()
            .map(|inp| {
                inp.map(|u| match self.lookup(u) {
                    Some((r, anchor)) => {
                        after = after.max(anchor);
                        r
                    }
                    None => {
                        if let Some(p) = graph.tensor(u).producer() {
                            after = after.max(self.pos[p.index()]);
                        }
                        TensorRef::Existing(u)
                    }
                })
            })
            .collect();
        let before = self
            .order
            .get(after + 1)
            .copied()
            .unwrap_or(self.order[self.order.len() - 1]);
        if is_moved {
            for t in node.output_tensors() {
                self.rebuilt.insert(t, (TensorRef::Existing(t), after));
            }
            self.patch.moves.push(Move {
                node: m,
                inputs,
                before,
                after_new: self.patch.nodes.len(),
            });
            return;
        }
        // Outputs after the first that are optional are omitted when nobody reads them (an
        // unread output would stay allocated to the end of the run).
        let optional_tail = ckpt_ir::ops::optional_tail(graph, m);
        let mut outputs: Vec<Option<TensorRef>> = Vec::with_capacity(node.outputs.len());
        for (slot, o) in node.outputs.iter().enumerate() {
            let kept = o.filter(|t| slot == 0 || !optional_tail || self.needed.contains(t));
            outputs.push(kept.map(|t| {
                let name = self.names.fresh(graph, &graph.tensor(t).name);
                self.patch.tensors.push(NewTensor { name, like: t });
                let r = TensorRef::New(self.patch.tensors.len() - 1);
                self.local.insert(t, (r, after));
                r
            }));
        }
        let base = if node.name.is_empty() {
            format!("{}_{}", node.op_type, m)
        } else {
            node.name.clone()
        };
        let name = self.names.fresh(graph, &base);
        self.patch.nodes.push(NewNode {
            name,
            copy_of: m,
            inputs,
            outputs,
            before,
        });
    }
}

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

#[cfg(test)]
mod names_tests {
    use super::Names;

    /// A base cloned again and again gets `.recompute`, `.recompute2`, …, skipping the names the
    /// graph already has and those given to another base, exactly as a search from
    /// `.recompute` each time would.
    #[test]
    fn each_clone_of_a_base_gets_the_next_free_name() {
        let g = ckpt_ir::parse_graph(
            r#"
input %0 "x": f32[4]
%1 "a": f32[4] = Exp(%0)  # "n_a"
%2 "a.recompute2": f32[4] = Exp(%1)  # "n_b"
output %2 "a.recompute2"
"#,
        )
        .unwrap();
        let mut names = Names::default();
        let given: Vec<String> = (0..4).map(|_| names.fresh(&g, "a")).collect();
        assert_eq!(
            given,
            [
                "a.recompute",
                "a.recompute3",
                "a.recompute4",
                "a.recompute5"
            ]
        );
        // Another base whose names collide with the first's: "a.recompute" + "3" is
        // "a.recompute3", already given.
        assert_eq!(names.fresh(&g, "a.recompute"), "a.recompute.recompute");
        assert_eq!(names.fresh(&g, "n_a"), "n_a.recompute");
        assert_eq!(names.fresh(&g, "a"), "a.recompute6");
    }
}
