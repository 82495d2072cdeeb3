//! The rewrite of a plan into one labelled [`Patch`]: every recomputed chain cloned
//! (`<name>.recompute`, the next free suffix after that) or moved, dependencies first, each
//! clone placed in the file right after the producers of its inputs, and the backward readers
//! rewired to the clones. Clones are shared among candidates rebuilt at one step, never across
//! steps; optional outputs nothing reads are omitted.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::{FxHashMap, FxHashSet};

use ckpt_ir::{Graph, Move, NewNode, NewTensor, NodeId, Patch, Rewire, TensorId, TensorRef};
use ckpt_solver::Plan;

use super::Candidates;

/// The names a rewrite has given its clones, and for each base name where its search for a
/// free one goes on.
#[derive(Default)]
struct Names {
    taken: FxHashSet<String>,
    /// The first suffix not yet tried for a base (1 is `.recompute`, `k > 1` is
    /// `.recompute{k}`): every earlier one is taken, and stays taken.
    next: FxHashMap<String, usize>,
    /// The graph's node names, read on the first call (a graph planned again holds the
    /// clones of its first plan: `node_x.recompute` may name a node and no tensor).
    nodes: Option<FxHashSet<String>>,
}

impl Names {
    /// A free tensor/node name: `base.recompute`, then `base.recompute2`, …, the first that is
    /// neither one of `graph`'s tensors or nodes nor given already. A base cloned once per
    /// candidate (recomputing every candidate of a deep graph clones one node hundreds of
    /// times) resumes where its last search stopped, not at `.recompute` again.
    fn fresh(&mut self, graph: &Graph, base: &str) -> String {
        let mut k = self.next.get(base).copied().unwrap_or(1);
        let nodes = self
            .nodes
            .get_or_insert_with(|| graph.node_names().map(str::to_string).collect());
        loop {
            let name = if k == 1 {
                format!("{base}.recompute")
            } else {
                format!("{base}.recompute{k}")
            };
            k += 1;
            if graph.tensor_id(&name).is_none()
                && !nodes.contains(&name)
                && !self.taken.contains(&name)
            {
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
    let chosen = dependencies_first(cands, plan);
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

/// The recomputed candidates, each after its recomputed dependencies (a dependency's clones
/// must exist before its dependents' clones read them): roots by rematerialisation step, then
/// index, each preceded by its dependencies in post-order.
fn dependencies_first(cands: &Candidates, plan: &Plan) -> Vec<usize> {
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
    chosen
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
                self.patch.tensors.push(NewTensor {
                    name,
                    like: Some(t),
                });
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
%3 "b": f32[4] = Exp(%2)  # "n_a.recompute"
output %3 "b"
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
        // A node's name is taken too: the node "n_a.recompute" writes the tensor "b".
        assert_eq!(names.fresh(&g, "n_a"), "n_a.recompute2");
        assert_eq!(names.fresh(&g, "a"), "a.recompute6");
    }
}
