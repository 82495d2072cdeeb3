//! The patch of a region in chunks ([`Writer`]): every chunk's nodes, the gates between
//! chunks, the exits' last links, and the file order made topological again.

use std::collections::{HashMap, HashSet};

use ckpt_ir::build::{attr_f, attr_i, attr_ints};
use ckpt_ir::{
    FreshNode, Graph, Move, NewConstant, NewTensor, NodeId, Patch, Substitute, TensorId, TensorRef,
};

use super::order::{longest_increasing, topological};
use super::{dims, outside, rank, Accumulate, Kind, Outside, Region};

/// One chunk's link of a product summing over the rows ([`Writer::contraction`]).
enum Link {
    /// The sum so far, a new value.
    Sum(TensorRef),
    /// The last link: the product's node rewritten.
    Last(Substitute),
}

/// Writes the patch of one region in chunks.
pub(super) struct Writer<'a> {
    graph: &'a Graph,
    region: &'a Region,
    chunks: u64,
    accumulate: Accumulate,
    patch: Patch,
    /// The chunks' nodes in the order they are written; [`Writer::place`] gives each its
    /// place in file order and moves them into the patch.
    written: Vec<FreshNode>,
    /// Names taken: the graph's tensors and the patch's so far, and so for nodes.
    tensors_taken: HashSet<String>,
    nodes_taken: HashSet<String>,
    /// (value, chunk) -> its chunk: a region value's, or an outside value's rows.
    chunk_of: HashMap<(TensorId, u64), TensorRef>,
    /// Constant i64 vectors made so far, by value.
    ints: HashMap<Vec<i64>, usize>,
}

impl<'a> Writer<'a> {
    pub(super) fn new(
        graph: &'a Graph,
        region: &'a Region,
        chunks: u64,
        accumulate: Accumulate,
        label: &str,
    ) -> Writer<'a> {
        Writer {
            graph,
            region,
            chunks,
            accumulate,
            patch: Patch::new(label),
            written: Vec::new(),
            tensors_taken: graph
                .tensor_ids()
                .map(|t| graph.tensor(t).name.clone())
                .collect(),
            nodes_taken: graph.node_names().map(str::to_string).collect(),
            chunk_of: HashMap::new(),
            ints: HashMap::new(),
        }
    }

    /// `base`, or `base_`, `base__`… : the first name no tensor holds, now taken.
    fn name(&mut self, base: String) -> String {
        untaken(&mut self.tensors_taken, base)
    }

    /// [`Writer::name`] among the nodes' names.
    fn node_name(&mut self, base: String) -> String {
        untaken(&mut self.nodes_taken, base)
    }

    /// A new untyped tensor named after `base`.
    fn tensor(&mut self, base: String) -> TensorRef {
        let name = self.name(base);
        self.patch.tensors.push(NewTensor { name, like: None });
        TensorRef::New(self.patch.tensors.len() - 1)
    }

    /// A constant 1-D i64 tensor of `values` (one per distinct value).
    fn ints(&mut self, values: &[i64]) -> TensorRef {
        if let Some(&c) = self.ints.get(values) {
            return TensorRef::Constant(c);
        }
        let joined: Vec<String> = values.iter().map(i64::to_string).collect();
        let name = self.name(format!("loss_head.chunked.i64_{}", joined.join("_")));
        self.patch.constants.push(NewConstant {
            name,
            value: crate::fold::i64_tensor(values),
            before: self.region.nodes[0], // placed by `place`
        });
        let c = self.patch.constants.len() - 1;
        self.ints.insert(values.to_vec(), c);
        TensorRef::Constant(c)
    }

    /// A node of `op` writing a new tensor named `out`, which it returns; the node is named
    /// after its output.
    fn node(
        &mut self,
        op: &str,
        attributes: Vec<ckpt_ir::onnx::AttributeProto>,
        inputs: Vec<Option<TensorRef>>,
        out: String,
    ) -> TensorRef {
        self.node_in(None, out.clone(), op, attributes, inputs, out)
    }

    /// `t` reshaped to `shape` (a constant of [`Writer::ints`]), a new tensor named `out`.
    fn reshape(&mut self, t: TensorRef, shape: TensorRef, out: String) -> TensorRef {
        self.node("Reshape", Vec::new(), vec![Some(t), Some(shape)], out)
    }

    /// [`Writer::node`] of an op of `domain` (`None`: ONNX's), the node named after `name`.
    fn node_in(
        &mut self,
        domain: Option<(String, i64)>,
        name: String,
        op: &str,
        attributes: Vec<ckpt_ir::onnx::AttributeProto>,
        inputs: Vec<Option<TensorRef>>,
        out: String,
    ) -> TensorRef {
        let t = self.tensor(out);
        let name = self.node_name(name);
        self.written.push(FreshNode {
            name,
            domain,
            op_type: op.to_string(),
            attributes,
            inputs,
            outputs: vec![Some(t)],
            before: self.region.nodes[0], // placed by `place`
        });
        t
    }

    /// Region node `n`'s op and attributes written for one chunk as the node `name`, reading
    /// `inputs` and writing `out`.
    fn chunk_copy(
        &mut self,
        n: NodeId,
        name: String,
        inputs: Vec<Option<TensorRef>>,
        out: String,
    ) -> TensorRef {
        let node = self.graph.node(n);
        let attributes = node.attributes().to_vec();
        self.node_in(None, name, &node.op_type, attributes, inputs, out)
    }

    /// Rows `[i*n, (i+1)*n)` of the outside value `t`.
    fn rows(&mut self, t: TensorId, i: u64) -> TensorRef {
        if let Some(&r) = self.chunk_of.get(&(t, i)) {
            return r;
        }
        let n = (self.region.rows / self.chunks) as i64;
        let (s, e, a) = (
            self.ints(&[i as i64 * n]),
            self.ints(&[(i as i64 + 1) * n]),
            self.ints(&[0]),
        );
        let name = format!("{}.rows{i}", self.graph.tensor(t).name);
        let r = self.node(
            "Slice",
            Vec::new(),
            vec![Some(TensorRef::Existing(t)), Some(s), Some(e), Some(a)],
            name,
        );
        self.chunk_of.insert((t, i), r);
        r
    }

    /// How region node `n` reads its input `t` in chunk `i` (`None`: a region value with no
    /// chunk i yet, which the region's file order rules out).
    fn input(&mut self, n: NodeId, slot: usize, t: TensorId, i: u64) -> Option<TensorRef> {
        Some(match self.region.kind.get(&t) {
            Some(Kind::Row) => *self.chunk_of.get(&(t, i))?,
            // A transposed row value is read as its rows, by a `Gemm(transA=1)`.
            Some(Kind::Col) => {
                let p = self.graph.tensor(t).producer()?;
                let src = self.graph.node(p).inputs.first().copied().flatten()?;
                *self.chunk_of.get(&(src, i))?
            }
            // A product of rows by a weight reads the weight whole, whatever its shape (a
            // `[D, V]` weight has as many rows as the logits where D = N).
            _ if slot > 0 && self.is_row_product(n) => TensorRef::Existing(t),
            _ => {
                let out_rank = self.graph.node(n).outputs[0]
                    .and_then(|o| rank(self.graph, o))
                    .unwrap_or(0);
                match outside(self.graph, self.region, t, out_rank) {
                    Some(Outside::Rows) => self.rows(t, i),
                    _ => TensorRef::Existing(t),
                }
            }
        })
    }

    /// Whether region node `n` is a `MatMul` or `Gemm` of row values by a weight.
    fn is_row_product(&self, n: NodeId) -> bool {
        let node = self.graph.node(n);
        matches!(node.op_type.as_str(), "MatMul" | "Gemm")
            && node.outputs[0].and_then(|o| self.region.kind.get(&o)) == Some(&Kind::Row)
    }

    /// The patch: every chunk's nodes, the gates between chunks, the exits' last links, the
    /// region's nodes removed, and the file order made topological again.
    pub(super) fn write(mut self) -> Option<Patch> {
        let graph = self.graph;
        let mut acc: HashMap<TensorId, TensorRef> = HashMap::new();
        let mut gate: Option<TensorRef> = None;
        let mut substitutes: Vec<Substitute> = Vec::new();
        let exits = &self.region.exits;
        for i in 0..self.chunks {
            let last = i + 1 == self.chunks;
            // The projection's rows of chunk i, gated on chunk i-1's exits.
            let rows = self.rows(self.region.rows_in, i);
            if let Some(g) = gate.take() {
                let rank = rank(graph, self.region.rows_in)?;
                let pads = self.ints(&vec![0; 2 * rank]);
                let name = format!("{}.gated{i}", graph.tensor(self.region.rows_in).name);
                let gated = self.node(
                    "Pad",
                    Vec::new(),
                    vec![Some(rows), Some(pads), Some(g)],
                    name,
                );
                self.chunk_of.insert((self.region.rows_in, i), gated);
            }
            let mut ends: Vec<TensorRef> = Vec::new();
            for &n in &self.region.nodes {
                let node = graph.node(n);
                let out = node.outputs[0]?;
                let kind = *self.region.kind.get(&out)?;
                if kind == Kind::Col {
                    continue;
                }
                let inputs: Vec<Option<TensorRef>> = node
                    .inputs
                    .clone()
                    .into_iter()
                    .enumerate()
                    .map(|(slot, t)| match t {
                        None => Some(None),
                        Some(t) => self.input(n, slot, t, i).map(Some),
                    })
                    .collect::<Option<_>>()?;
                let out_name = graph.tensor(out).name.clone();
                match kind {
                    Kind::Row => {
                        let base = if node.name.is_empty() {
                            &out_name
                        } else {
                            &node.name
                        };
                        let name = format!("{base}.chunk{i}");
                        let r = self.chunk_copy(n, name, inputs, format!("{out_name}.chunk{i}"));
                        self.chunk_of.insert((out, i), r);
                        if exits.contains(&out) {
                            ends.push(r);
                        }
                    }
                    Kind::Contraction => {
                        let link = self.contraction(n, (inputs[0]?, inputs[1]?), i, &acc)?;
                        match link {
                            Link::Sum(s) if !last => {
                                acc.insert(out, s);
                                ends.push(s);
                            }
                            Link::Sum(_) => return None,
                            Link::Last(sub) => substitutes.push(sub),
                        }
                    }
                    Kind::Sum => {
                        let part = format!("{out_name}.part{i}");
                        let part = self.chunk_copy(n, part.clone(), inputs, part);
                        let total = match acc.get(&out) {
                            Some(&before) if !last => Some(self.node(
                                "Add",
                                Vec::new(),
                                vec![Some(before), Some(part)],
                                format!("{out_name}.sum{i}"),
                            )),
                            Some(&before) => {
                                substitutes.push(Substitute {
                                    node: n,
                                    op_type: "Add".into(),
                                    attributes: Vec::new(),
                                    inputs: vec![Some(before), Some(part)],
                                });
                                None
                            }
                            None => Some(part),
                        };
                        if let Some(t) = total {
                            acc.insert(out, t);
                            ends.push(t);
                        }
                    }
                    Kind::Col => {}
                }
            }
            if !last {
                gate = Some(self.gate(i, &ends));
            }
        }
        // Row values read outside: the chunks' Concat, written by the node that wrote them.
        for &n in &self.region.nodes {
            let out = graph.node(n).outputs[0]?;
            if self.region.kind.get(&out) == Some(&Kind::Row) && exits.contains(&out) {
                let parts = (0..self.chunks)
                    .map(|i| self.chunk_of.get(&(out, i)).map(|&c| Some(c)))
                    .collect::<Option<_>>()?;
                substitutes.push(Substitute {
                    node: n,
                    op_type: "Concat".into(),
                    attributes: vec![attr_i("axis", 0)],
                    inputs: parts,
                });
            }
        }
        let kept: HashSet<NodeId> = substitutes.iter().map(|s| s.node).collect();
        self.place(&substitutes, &kept)?;
        self.patch.substitutes = substitutes;
        let order = graph.file_positions();
        let mut removals: Vec<NodeId> = self
            .region
            .nodes
            .iter()
            .copied()
            .filter(|n| !kept.contains(n))
            .collect();
        removals.sort_by_key(|n| std::cmp::Reverse(order[n.index()]));
        self.patch.removals = removals;
        Some(self.patch)
    }

    /// Chunk `i`'s link of the product `n` summing `a`ᵀ·`b` over the rows, the sum of the
    /// chunks before in `acc`: the new sum, or for the last chunk the substitute that writes
    /// the product's output ([`Accumulate`]).
    fn contraction(
        &mut self,
        n: NodeId,
        (a, b): (TensorRef, TensorRef),
        i: u64,
        acc: &HashMap<TensorId, TensorRef>,
    ) -> Option<Link> {
        let graph = self.graph;
        let out = graph.node(n).outputs[0]?;
        let out_name = graph.tensor(out).name.clone();
        let before = acc.get(&out).copied();
        let last = i + 1 == self.chunks;
        if self.accumulate == Accumulate::Gemm {
            let mut ins = vec![Some(a), Some(b)];
            ins.extend(before.map(Some));
            let mut attributes = vec![attr_i("transA", 1)];
            if before.is_some() {
                attributes.push(attr_f("beta", 1.0));
            }
            return Some(if last {
                Link::Last(Substitute {
                    node: n,
                    op_type: "Gemm".into(),
                    attributes,
                    inputs: ins,
                })
            } else {
                Link::Sum(self.node("Gemm", attributes, ins, format!("{out_name}.sum{i}")))
            });
        }
        // [P, Q] = aᵀ·b as the 1×1 convolution of b's rows, [1, rows, Q, 1], by aᵀ,
        // [P, rows, 1, 1]: Y = [1, P, Q, 1], the sum before its Z.
        if graph.tensor(out).dtype != Some(ckpt_ir::DType::F32) {
            return None;
        }
        let pq: Vec<i64> = dims(graph, out)?
            .iter()
            .map(|d| d.known().and_then(|v| i64::try_from(v).ok()))
            .collect::<Option<_>>()?;
        let [p, q] = pq[..] else {
            return None;
        };
        let rows = i64::try_from(self.region.rows / self.chunks).ok()?;
        let x_shape = self.ints(&[1, rows, q, 1]);
        let x = self.reshape(b, x_shape, format!("{out_name}.x{i}"));
        let at = self.node(
            "Transpose",
            vec![attr_ints("perm", &[1, 0])],
            vec![Some(a)],
            format!("{out_name}.t{i}"),
        );
        let w_shape = self.ints(&[p, rows, 1, 1]);
        let w = self.reshape(at, w_shape, format!("{out_name}.w{i}"));
        let mut ins = vec![Some(x), Some(w)];
        if let Some(z) = before {
            ins.extend([None, Some(z)]);
        }
        let name = format!("{out_name}.sum{i}");
        let ms = Some(("com.microsoft".to_string(), 1));
        let s = self.node_in(ms, name.clone(), "FusedConv", Vec::new(), ins, name);
        if !last {
            return Some(Link::Sum(s));
        }
        let shape = self.ints(&[p, q]);
        Some(Link::Last(Substitute {
            node: n,
            op_type: "Reshape".into(),
            attributes: Vec::new(),
            inputs: vec![Some(s), Some(shape)],
        }))
    }

    /// A scalar computed from one element of each of `ends`: what chunk `i + 1` waits for.
    fn gate(&mut self, i: u64, ends: &[TensorRef]) -> TensorRef {
        let (flat, zero, one, scalar) = (
            self.ints(&[-1]),
            self.ints(&[0]),
            self.ints(&[1]),
            self.ints(&[]),
        );
        let mut firsts = Vec::with_capacity(ends.len());
        for (j, &e) in ends.iter().enumerate() {
            let base = format!("loss_head.chunked.gate{i}.{j}");
            let f = self.reshape(e, flat, format!("{base}.flat"));
            let s = self.node(
                "Slice",
                Vec::new(),
                vec![Some(f), Some(zero), Some(one)],
                format!("{base}.one"),
            );
            firsts.push(Some(s));
        }
        let sum = self.node(
            "Sum",
            Vec::new(),
            firsts,
            format!("loss_head.chunked.gate{i}.sum"),
        );
        self.reshape(sum, scalar, format!("loss_head.chunked.gate{i}"))
    }
}

impl Writer<'_> {
    /// The chunks' nodes placed, and the graph's nodes moved where they must be, so that the
    /// file order is topological again: a stable topological sort in which every node keeps
    /// its place where it can, the chunks' nodes come where the region's last node was, and
    /// a node reading what leaves the region comes after it. The nodes whose order the sort
    /// keeps (the longest run of them) stay; the chunks' nodes and the others are placed
    /// before the next one that stays. `None` where no node stays after the last one placed.
    fn place(&mut self, substitutes: &[Substitute], kept: &HashSet<NodeId>) -> Option<()> {
        let graph = self.graph;
        let region: HashSet<NodeId> = self.region.nodes.iter().copied().collect();
        let originals: Vec<NodeId> = graph
            .nodes()
            .iter()
            .copied()
            .filter(|n| !region.contains(n) || kept.contains(n))
            .collect();
        let m = originals.len();
        let unit_of: HashMap<NodeId, usize> =
            originals.iter().enumerate().map(|(u, &n)| (n, u)).collect();
        let mut writer_of_new: HashMap<usize, usize> = HashMap::new();
        for (s, spec) in self.written.iter().enumerate() {
            for o in spec.outputs.iter().flatten() {
                if let TensorRef::New(k) = *o {
                    writer_of_new.insert(k, m + s);
                }
            }
        }
        let producer = |r: &TensorRef| -> Option<usize> {
            match *r {
                TensorRef::Existing(t) => graph
                    .tensor(t)
                    .producer()
                    .and_then(|p| unit_of.get(&p).copied()),
                TensorRef::New(k) => writer_of_new.get(&k).copied(),
                TensorRef::Constant(_) => None,
            }
        };
        let subs: HashMap<NodeId, &Substitute> = substitutes.iter().map(|s| (s.node, s)).collect();
        let total = m + self.written.len();
        let mut deps: Vec<Vec<usize>> = vec![Vec::new(); total];
        for (u, &n) in originals.iter().enumerate() {
            deps[u] = match subs.get(&n) {
                Some(s) => s.inputs.iter().flatten().filter_map(&producer).collect(),
                None => graph
                    .node(n)
                    .input_tensors()
                    .filter_map(|t| producer(&TensorRef::Existing(t)))
                    .collect(),
            };
        }
        for (s, spec) in self.written.iter().enumerate() {
            deps[m + s] = spec.inputs.iter().flatten().filter_map(&producer).collect();
        }
        // Priorities: an original's file position, the chunks' nodes right after the
        // region's last node, in the order they were written.
        let pos = graph.file_positions();
        let last = self.region.nodes.iter().map(|n| pos[n.index()]).max()? as u64;
        let key = |u: usize| -> (u64, u64) {
            if u < m {
                (pos[originals[u].index()] as u64, 0)
            } else {
                (last, 1 + (u - m) as u64)
            }
        };
        let f = topological(&deps, key)?;
        // The originals whose relative order the sort keeps stay; the rest are placed.
        let at: Vec<usize> = {
            let mut at = vec![0; total];
            for (i, &u) in f.iter().enumerate() {
                at[u] = i;
            }
            at
        };
        let stays = longest_increasing(&(0..m).map(|u| at[u]).collect::<Vec<_>>());
        let mut anchor: Vec<Option<NodeId>> = vec![None; total];
        let mut next: Option<NodeId> = None;
        for &u in f.iter().rev() {
            if u < m && stays.contains(&u) {
                next = Some(originals[u]);
            } else {
                anchor[u] = Some(next?);
            }
        }
        let mut written: Vec<Option<FreshNode>> = std::mem::take(&mut self.written)
            .into_iter()
            .map(Some)
            .collect();
        // The constants go before the first node placed (ahead of the patch's other nodes at
        // its anchor).
        let first = f.iter().find(|&&u| u >= m || !stays.contains(&u))?;
        for c in &mut self.patch.constants {
            c.before = anchor[*first]?;
        }
        for &u in &f {
            if u >= m {
                let mut fresh = written[u - m].take()?;
                fresh.before = anchor[u]?;
                self.patch.fresh.push(fresh);
            } else if !stays.contains(&u) {
                let mut mv = Move::reorder(graph, originals[u], anchor[u]?);
                mv.after_new = self.patch.fresh.len();
                self.patch.moves.push(mv);
            }
        }
        Some(())
    }
}

/// `base`, or `base_`, `base__`… : the first name `taken` does not hold, now taken.
fn untaken(taken: &mut HashSet<String>, base: String) -> String {
    let mut name = base;
    while taken.contains(&name) {
        name.push('_');
    }
    taken.insert(name.clone());
    name
}
