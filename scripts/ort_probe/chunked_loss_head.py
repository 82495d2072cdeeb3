"""The loss head split into row chunks, written by hand into a training graph, for measuring on
ONNX Runtime what `ckpt-opt` predicts (`ckpt-opt inspect`) and what it measures
(`ckpt-opt validate ORIGINAL CHUNKED`).

    python scripts/ort_probe/chunked_loss_head.py MODEL.onnx K OUT.onnx

The region: the vocabulary projection (a MatMul of rows [N, D] by a weight [D, V]) that feeds a
LogSoftmax, and every node that reads the region's values row by row (elementwise ops,
LogSoftmax/Softmax, ReduceSum, Gather/ScatterElements, Unsqueeze/Squeeze off the row axis, a
MatMul of rows by a weight), pulled in forwards from the projection and backwards into
producers whose outputs only the region reads (the one-hot's ScatterElements and its
ConstantOfShape of zeros). Each region node is written K times, on rows [i*N/K, (i+1)*N/K).
What leaves the region:
  - a value with rows, read outside: the chunks' Concat on axis 0 (the gradient of the hidden
    state);
  - a ReduceSum over everything (the loss's sum): an Add chain of the chunks' sums;
  - a MatMul of a transposed row value by rows, which sums over the rows (the weight's gradient):
    a Gemm chain, each chunk's Gemm(transA=1) adding the one before as its C.
A chunk's projection reads the head's weight through its transposes (`Gemm(transB=1)`, or the
weight itself after two), and transposes only the region read are dropped. Chunks run one
after another in ONNX Runtime's walk: chunk i+1's rows of the projection's input
are a Pad with no padding whose constant value is a scalar computed from every value chunk i
leaves the region with, so its walk reaches the whole of chunk i first (the values are
unchanged: no position is padded).
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper, shape_inference

ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Where", "Exp", "Log", "Neg", "Not", "Equal", "Cast",
               "Less", "Greater", "And", "Or", "Abs", "Sqrt", "Relu", "Max", "Min"}


def shapes(m):
    inferred = shape_inference.infer_shapes(m)
    out = {}
    g = inferred.graph
    for v in list(g.value_info) + list(g.input) + list(g.output):
        t = v.type.tensor_type
        if t.HasField("shape"):
            out[v.name] = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    for i in g.initializer:
        out[i.name] = list(i.dims)
    return out


def const_ints(g, inits, name):
    if name in inits:
        return [int(x) for x in numpy_helper.to_array(inits[name]).ravel()]
    for n in g.node:
        if n.op_type == "Constant" and n.output[0] == name:
            return [int(x) for x in numpy_helper.to_array(n.attribute[0].t).ravel()]
    return None


def attr(n, name, default=None):
    for a in n.attribute:
        if a.name == name:
            return h.get_attribute_value(a)
    return default


def main(path, k, out_path):
    m = onnx.load(path)
    g = m.graph
    shp = shapes(m)
    inits = {i.name: i for i in g.initializer}
    prod = {o: n for n in g.node for o in n.output}
    readers = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    outputs = {o.name for o in g.output}
    lsm = next(n for n in g.node if n.op_type == "LogSoftmax")
    proj = prod[lsm.input[0]]
    assert proj.op_type == "MatMul", proj.op_type
    rows_in = proj.input[0]
    N, V = shp[proj.output[0]]
    assert N % k == 0, f"{N} rows do not split into {k}"
    n = N // k
    region = {id(proj): proj}
    kind = {proj.output[0]: "row"}  # row, col (a transposed row value), sum, contraction

    def rank(t):
        return len(shp.get(t, []))

    def outside_ok(t, out_rank):
        s = shp.get(t)
        if s is None:
            return None
        if len(s) == out_rank and s and s[0] == N:
            return "slice"
        if len(s) < out_rank or (s and s[0] == 1):
            return "share"
        return None

    def row_input(node, j, t):
        """Whether input `j` (`t`, outside the region) of `node` holds rows: sliced per chunk."""
        sh = shp.get(t)
        if not sh or sh[0] != N:
            return False
        op = node.op_type
        if op in ELEMENTWISE or op in ("GatherElements", "ScatterElements"):
            return len(sh) == rank(node.output[0])
        if op == "MatMul":
            return j == 0 or kind.get(node.input[0]) == "col"
        return j == 0

    def classify(node, pulled=False):
        """The kind of `node`'s output if it reads the region row by row (or sums its rows).
        `pulled`: the node is outside the region, and its sliced outside inputs count as rows."""
        op = node.op_type
        ins = [i for i in node.input if i]
        out_rank = rank(node.output[0])

        def kd(j, t):
            if t in kind:
                return kind[t]
            if pulled and row_input(node, j, t):
                return "row"
            return None
        kinds = [kd(j, i) for j, i in enumerate(ins)]
        if op == "ConstantOfShape" or (op == "Expand" and rank(ins[0]) == 0):
            shape = const_ints(g, inits, node.input[-1])
            return "row" if pulled and shape and shape[0] == N else None
        if not any(kinds):
            return None
        plain = all(k_ == "row" or (k_ is None and outside_ok(i, out_rank)) for i, k_ in zip(ins, kinds))
        if op in ELEMENTWISE:
            return "row" if plain else None
        if op in ("LogSoftmax", "Softmax"):
            return "row" if attr(node, "axis", -1) % rank(ins[0]) != 0 else None
        if op in ("GatherElements", "ScatterElements"):
            return "row" if plain and attr(node, "axis", 0) % rank(ins[0]) != 0 else None
        if op in ("Unsqueeze", "Squeeze"):
            axes = const_ints(g, inits, node.input[1]) if len(node.input) > 1 else None
            if kinds[0] == "row" and axes and all(a % max(out_rank, rank(ins[0])) != 0 for a in axes):
                return "row"
            return None
        if op == "ReduceSum":
            axes = const_ints(g, inits, node.input[1]) if len(node.input) > 1 and node.input[1] else None
            if kinds[0] != "row":
                return None
            if axes and all(a % rank(ins[0]) != 0 for a in axes):
                return "row"
            if not pulled and not axes and attr(node, "keepdims", 1) == 0 and attr(node, "noop_with_empty_axes", 0) == 0:
                return "sum"
            return None
        if op == "Transpose":
            if pulled:
                return None
            return "col" if kinds[0] == "row" and rank(ins[0]) == 2 and attr(node, "perm") == [1, 0] else None
        if op == "MatMul":
            a, b = kinds
            if a == "row" and ins[1] not in kind:
                return "row"  # the weight, shared by every chunk
            if not pulled and a == "col" and (b == "row" or (b is None and outside_ok(ins[1], 2) == "slice")):
                return "contraction"
            return None
        return None

    def pull_back(node):
        """A producer outside the region whose outputs only region nodes read, computed row by
        row from sliced, shared or region values: it is written per chunk too."""
        if any(o in outputs for o in node.output) or len(node.output) != 1:
            return False
        rs = readers.get(node.output[0], [])
        if not rs or not all(id(r) in region for r in rs):
            return False
        return classify(node, pulled=True) == "row"

    changed = True
    while changed:
        changed = False
        for node in g.node:
            if id(node) in region:
                continue
            c = classify(node)
            if c:
                region[id(node)] = node
                kind[node.output[0]] = c
                changed = True
        for node in list(region.values()):
            for i in node.input:
                p = prod.get(i)
                if p is not None and id(p) not in region and pull_back(p):
                    region[id(p)] = p
                    kind[p.output[0]] = "row"
                    changed = True
    # Sums and contractions end their paths: nothing in the region may read them.
    for node in region.values():
        for i in node.input:
            assert kind.get(i) not in ("sum", "contraction"), f"{node.name} reads a sum"
    exits = [t for t in kind if (t in outputs or any(id(r) not in region for r in readers.get(t, [])))]
    for t in exits:
        assert kind[t] in ("row", "sum", "contraction"), f"{t} ({kind[t]}) leaves the region"
    print(f"region: {len(region)} nodes; exits: " + ", ".join(f"{t} ({kind[t]})" for t in exits), file=sys.stderr)

    order = [x for x in g.node if id(x) in region]
    new_nodes, new_inits = [], []
    names = {}

    def chunk_name(t, i):
        return f"{t}.chunk{i}"

    def sliced(t, i):
        key = (t, i)
        if key not in names:
            s = f"{t}.rows{i}"
            st, en, ax = f"{s}.starts", f"{s}.ends", f"{s}.axes"
            new_inits.extend([numpy_helper.from_array(np.array([i * n], np.int64), st),
                              numpy_helper.from_array(np.array([(i + 1) * n], np.int64), en),
                              numpy_helper.from_array(np.array([0], np.int64), ax)])
            new_nodes.append(h.make_node("Slice", [t, st, en, ax], [s], name=s))
            names[key] = s
        return names[key]

    pads = "chunked.no_pads"
    new_inits.append(numpy_helper.from_array(np.zeros(2 * rank(rows_in), np.int64), pads))
    gate = None
    acc = {}
    pieces = {}
    for i in range(k):
        # The projection's rows of chunk i, gated on chunk i-1's exits.
        rows = sliced(rows_in, i)
        if gate is not None:
            gated = f"{rows_in}.gated{i}"
            new_nodes.append(h.make_node("Pad", [rows, pads, gate], [gated], name=gated))
            names[(rows_in, i)] = gated
        ends = []
        for node in order:
            if node.op_type in ("ConstantOfShape", "Expand"):
                s = const_ints(g, inits, node.input[-1])
                sn = f"{node.output[0]}.shape{i}"
                new_inits.append(numpy_helper.from_array(np.array([n] + s[1:], np.int64), sn))
                c = onnx.NodeProto()
                c.CopyFrom(node)
                c.name = f"{node.name or node.output[0]}.chunk{i}"
                c.input[len(c.input) - 1] = sn
                c.output[0] = chunk_name(node.output[0], i)
                new_nodes.append(c)
                continue
            if kind[node.output[0]] == "col":
                # Read only by contractions, which take the rows with transA.
                assert all(kind.get(r.output[0]) == "contraction" for r in readers[node.output[0]])
                continue
            ins = []
            for j, t in enumerate(node.input):
                if not t:
                    ins.append(t)
                elif kind.get(t) in ("row", "col"):
                    ins.append(chunk_name(t, i))
                elif row_input(node, j, t):
                    ins.append(sliced(t, i))
                else:
                    ins.append(t)
            out = node.output[0]
            c = onnx.NodeProto()
            c.CopyFrom(node)
            c.name = f"{node.name or out}.chunk{i}"
            del c.input[:]
            c.input.extend(ins)
            if node.op_type == "MatMul" and kind[out] == "row":
                base, flips = ins[1], 0
                while base in prod and prod[base].op_type == "Transpose" and attr(prod[base], "perm") == [1, 0]:
                    base, flips = prod[base].input[0], flips + 1
                if flips:
                    c = h.make_node("Gemm", [ins[0], base], [chunk_name(out, i)], name=c.name,
                                    transB=flips % 2)
                    new_nodes.append(c)
                    continue
            if kind[out] == "contraction":
                # Gemm(rows_i, other rows_i, C = the sum so far, transA=1).
                col = next(t for t in node.input if kind.get(t) == "col")
                src = next(x for x in order if x.output[0] == col)
                a = chunk_name(src.input[0], i)
                gname = f"{out}.sum{i}" if i < k - 1 else out
                gin = [a, ins[1]] + ([acc[out]] if out in acc else [])
                new_nodes.append(h.make_node("Gemm", gin, [gname], name=gname, transA=1))
                acc[out] = gname
                ends.append(gname)
                continue
            if kind[out] == "sum":
                part = f"{out}.part{i}"
                del c.output[:]
                c.output.append(part)
                new_nodes.append(c)
                if out in acc:
                    total = f"{out}.sum{i}" if i < k - 1 else out
                    new_nodes.append(h.make_node("Add", [acc[out], part], [total], name=total))
                    acc[out] = total
                else:
                    acc[out] = part if k > 1 else out
                    if k == 1:
                        c.output[0] = out
                ends.append(acc[out])
                continue
            del c.output[:]
            c.output.append(chunk_name(out, i))
            new_nodes.append(c)
        for t in exits:
            if kind[t] == "row":
                pieces.setdefault(t, []).append(chunk_name(t, i))
                ends.append(chunk_name(t, i))
        if i < k - 1:
            # The gate: one scalar from every value chunk i leaves with.
            scalars = []
            flat = "chunked.flat"
            if not any(x.name == flat for x in new_inits):
                new_inits.extend([numpy_helper.from_array(np.array([-1], np.int64), flat),
                                  numpy_helper.from_array(np.array([0], np.int64), "chunked.zero"),
                                  numpy_helper.from_array(np.array([1], np.int64), "chunked.one")])
            for j, e in enumerate(ends):
                s1 = f"chunked.gate{i}.{j}"
                new_nodes.append(h.make_node("Reshape", [e, flat], [f"{s1}.flat"], name=f"{s1}.flat"))
                new_nodes.append(h.make_node("Slice", [f"{s1}.flat", "chunked.zero", "chunked.one"], [f"{s1}.one"], name=f"{s1}.one"))
                scalars.append(f"{s1}.one")
            gate = f"chunked.gate{i}"
            shape0 = f"{gate}.shape"
            new_inits.append(numpy_helper.from_array(np.array([], np.int64), shape0))
            new_nodes.append(h.make_node("Sum", scalars, [f"{gate}.sum"], name=f"{gate}.sum"))
            new_nodes.append(h.make_node("Reshape", [f"{gate}.sum", shape0], [gate], name=gate))
    for t, ps in pieces.items():
        new_nodes.append(h.make_node("Concat", ps, [t], name=f"{t}.concat", axis=0))
    # Nodes outside the region that only the region read (the weight's transposes) go.
    kept = [x for x in g.node if id(x) not in region]
    graph_outs = {o.name for o in g.output}
    while True:
        read = {t for x in kept + new_nodes for t in x.input}
        dead = [x for x in kept if not any(o in read or o in graph_outs for o in x.output)]
        if not dead:
            break
        dead_ids = {id(x) for x in dead}
        kept = [x for x in kept if id(x) not in dead_ids]
        print("removed " + ", ".join(x.output[0] for x in dead), file=sys.stderr)
    kept_ids = {id(x) for x in kept}
    # File order: the chunks where the region's last node was, then a stable topological sort.
    old_nodes = list(g.node)
    last = max(j for j, x in enumerate(old_nodes) if id(x) in region)
    prio = {}
    for j, x in enumerate(old_nodes):
        if id(x) not in region:
            prio[id(x)] = float(j)
    for j, x in enumerate(new_nodes):
        prio[id(x)] = last + (j + 1) / (len(new_nodes) + 1)
    every = [x for x in old_nodes if id(x) in kept_ids] + new_nodes
    made = {o: x for x in every for o in x.output}
    import heapq
    waiting = {id(x): sum(1 for t in set(x.input) if t in made) for x in every}
    users = {}
    for x in every:
        for t in set(x.input):
            if t in made:
                users.setdefault(t, []).append(x)
    heap = [(prio[id(x)], j, x) for j, x in enumerate(every) if waiting[id(x)] == 0]
    heapq.heapify(heap)
    seq = []
    ids = {id(x): j for j, x in enumerate(every)}
    while heap:
        _, _, x = heapq.heappop(heap)
        seq.append(x)
        for t in x.output:
            for u in users.get(t, []):
                waiting[id(u)] -= 1
                if waiting[id(u)] == 0:
                    heapq.heappush(heap, (prio[id(u)], ids[id(u)], u))
    assert len(seq) == len(every), "a cycle"
    del g.node[:]
    g.node.extend(seq)
    g.initializer.extend(new_inits)
    region_values = {o for x in region.values() for o in x.output}
    keep = [v for v in g.value_info if v.name not in region_values]
    del g.value_info[:]
    g.value_info.extend(keep)
    onnx.checker.check_model(m)
    onnx.save(m, out_path)
    print(f"wrote {out_path}: {len(region)} nodes in {k} chunks of {n} rows", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
