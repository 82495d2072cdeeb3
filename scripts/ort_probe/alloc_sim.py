"""Predict ORT 1.31 CPU arena MaxInUse for one Run (memory pattern off) from the rules in
docs/design/ort-internals.md, and compare with the measured value (memprobe) on random graphs.

Model of ORT (see the doc for sources):
  order    = ort_default_order (reverse DFS from leaves, highest index first)
  planner  = allocation_planner.cc ComputeReuseCount + ComputeSingleStreamReusePlan, plus the
             empirical rule that a value nobody reads never takes a freed buffer (DEAD_NO_REUSE=0
             turns it off, to see the difference)
  runtime  = outputs allocated when their node runs; a buffer (origin kAllocate) is released right
             after the last node (in order) that reads any value sharing it; graph outputs and
             unconsumed values are never released during the run
  arena    = BFCArena (256 B rounding, bins, best fit, split rule, coalescing, power-of-two regions)

Usage: python alloc_sim.py [N_GRAPHS] [SEED] [LEVEL]
"""
import json
import os
import random
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

from ort_order import ort_default_order

DEAD_NO_REUSE = os.environ.get("DEAD_NO_REUSE", "1") == "1"
MEMPROBE = os.environ.get("MEMPROBE", "/tmp/memprobe/target/debug/memprobe")  # see memprobe/build.sh

ALIAS_OPS = {"Reshape", "Identity", "Squeeze", "Unsqueeze", "Flatten"}  # output 0 aliases input 0
INPLACE_OPS = {"Relu", "Sigmoid", "Tanh", "LeakyRelu", "Elu", "Softplus", "HardSigmoid", "Softmax",
               "LogSoftmax", "Clip", "Cast", "Selu", "Celu", "ThresholdedRelu", "Shrink", "Trilu",
               "ScatterElements"}  # MayInplace(0, 0), measured (alloc_probe.py)
ELEM_SIZE = {TensorProto.FLOAT: 4, TensorProto.INT64: 8, TensorProto.FLOAT16: 2, TensorProto.INT32: 4,
             TensorProto.BOOL: 1, TensorProto.DOUBLE: 8}


# ---------------------------------------------------------------- planner + runtime
def plan_and_trace(model, order=None):
    """Returns the list of arena events [('alloc', buf, bytes) | ('free', buf)] for one Run.
    `order`: node positions in execution order (default: ort_default_order of the file graph)."""
    g = model.graph
    nodes = [n for n in g.node]
    inits = {i.name for i in g.initializer}
    graph_inputs = {i.name for i in g.input} - inits
    outputs = [o.name for o in g.output]
    vi = {v.name: v for v in list(g.value_info) + list(g.output) + list(g.input)}

    init_shapes = {i.name: (tuple(i.dims), ELEM_SIZE[i.data_type]) for i in g.initializer}

    def shape(t):
        if t not in vi and t in init_shapes:
            return init_shapes[t]
        tt = vi[t].type.tensor_type
        return tuple(d.dim_value if d.HasField("dim_value") else ("?" + d.dim_param) for d in tt.shape.dim), \
            ELEM_SIZE[tt.elem_type]

    def nbytes(t):
        dims, es = shape(t)
        return int(np.prod(dims)) * es if dims else es

    if order is None:
        order = ort_default_order([{"inputs": list(n.input), "outputs": list(n.output)} for n in nodes])

    use = {}
    def inc(t, k=1):
        use[t] = use.get(t, 0) + k
    for t in graph_inputs | inits:
        inc(t)
    for i in order:
        for t in nodes[i].input:
            if t:
                inc(t)
        for t in nodes[i].output:
            if t:
                inc(t)
    for t in outputs:
        inc(t)

    buf = {t: t for t in graph_inputs | inits}  # value -> origin buffer value
    kind = {}
    freelist = []  # most recently freed first
    for t in graph_inputs | inits:
        kind[t] = "pre"
    for pc, i in enumerate(order):
        n = nodes[i]
        for k, out in enumerate(n.output):
            if not out:
                continue
            if out in outputs:
                kind[out] = "output"; buf[out] = out
                continue
            reused = None
            if k == 0 and n.op_type in ALIAS_OPS and n.input and n.input[0]:
                reused = n.input[0]
            elif k == 0 and n.op_type in INPLACE_OPS and n.input and n.input[0]:
                src = n.input[0]
                if use[buf[src]] == 1 and shape(src) == shape(out):
                    reused = src
            dead = use[out] == 1  # produced, read by nobody, not a graph output
            if reused is None and shape(out)[0] and not (dead and DEAD_NO_REUSE):
                for fi, f in enumerate(freelist):
                    if shape(f) == shape(out):
                        reused = f
                        freelist.pop(fi)
                        break
            if reused is not None:
                orig = buf[reused]
                buf[out] = orig
                use[orig] += use[out]
                kind[out] = "reuse"
            else:
                buf[out] = out
                kind[out] = "alloc"
        for t in n.input:
            if t:
                o = buf[t]
                use[o] -= 1
                if use[o] == 0:
                    freelist.insert(0, o)
        for t in n.output:
            if t:
                o = buf[t]
                use[o] -= 1
                if use[o] == 0:
                    freelist.insert(0, o)

    if os.environ.get("SIM_DEBUG"):
        for i in order:
            for out in nodes[i].output:
                print("  plan", nodes[i].op_type, out, kind[out], buf[out])
    # release plan: last consumer (in order) of each kAllocate origin buffer
    last = {}
    for pc, i in enumerate(order):
        for t in nodes[i].input:
            if t and kind.get(buf.get(t)) == "alloc":
                last[buf[t]] = pc
    events = []
    live = set()

    def scratch_of(n):
        """Kernel temporaries (sizes in bytes) and whether they are taken before the outputs."""
        if n.op_type == "Where":
            # where_op.cc: X_selection = bcast(cond, X) and Y_selection = bcast(cond, Y) are
            # allocated first, then the output (UntypedMerge); both die when the kernel returns
            c = shape(n.input[0])[0]
            sizes = []
            for t in n.input[1:3]:
                dims, es = shape(t)
                b = np.broadcast_shapes(tuple(c), tuple(dims))
                sizes.append(int(np.prod(b)) * es if b else es)
            return sizes, True
        if n.op_type in ("Softmax", "LogSoftmax"):
            axis = next((a.i for a in n.attribute if a.name == "axis"), -1)
            rank = len(shape(n.input[0])[0])
            if axis not in (-1, rank - 1):  # the kernel transposes the axis last: two temporaries
                return [nbytes(n.input[0])] * 2, False
        return [], False

    for pc, i in enumerate(order):
        scratch, before = scratch_of(nodes[i])
        keys = [f"__scratch{pc}_{k}" for k in range(len(scratch))]
        if before:
            events.extend(("alloc", key, size) for key, size in zip(keys, scratch))
        for out in nodes[i].output:
            if not out:
                continue
            if kind[out] in ("alloc", "output"):
                events.append(("alloc", out, nbytes(out)))
                live.add(out)
            elif kind[out] == "reuse" and kind.get(buf[out]) == "alloc" and buf[out] not in live:
                # ExecutionFrame::AllocateReusedOrtValueIfNotAllocatedHelper: the buffer this value was
                # planned into was already released: it is allocated again and, its release action
                # being past, stays until the end of the run (rule 8 of the doc; does not arise
                # once values nobody reads stay out of freed buffers)
                events.append(("alloc", buf[out], nbytes(out)))
                live.add(buf[out])
        if not before:
            events.extend(("alloc", key, size) for key, size in zip(keys, scratch))
        events.extend(("free", key) for key in keys)
        for b, lpc in last.items():
            if lpc == pc and b in live:
                events.append(("free", b))
                live.discard(b)
    return events


# ---------------------------------------------------------------- BFC arena
class Arena:
    MIN = 256
    NUM_BINS = 21

    def __init__(self, initial=1 << 20, max_pow2=1 << 30, max_dead=128 << 20):
        self.curr = initial
        self.max_pow2 = max_pow2
        self.max_dead = max_dead
        self.chunks = {}  # ptr -> dict(size, in_use, prev, next)
        self.next_base = 1 << 40
        self.in_use = 0
        self.max_in_use = 0
        self.ptr_of = {}

    @staticmethod
    def rounded(n):
        return (n + 255) // 256 * 256

    def bin_of(self, size):
        v = max(size, 256) >> 8
        return min(v.bit_length() - 1, self.NUM_BINS - 1)

    def free_in_bin(self, b):
        return sorted((c["size"], p) for p, c in self.chunks.items() if not c["in_use"] and self.bin_of(c["size"]) == b)

    def find(self, rounded):
        for b in range(self.bin_of(rounded), self.NUM_BINS):
            for size, p in self.free_in_bin(b):
                if size >= rounded:
                    c = self.chunks[p]
                    if size >= 2 * rounded or size - rounded >= self.max_dead:
                        q = p + rounded
                        self.chunks[q] = {"size": size - rounded, "in_use": False, "prev": p, "next": c["next"]}
                        if c["next"] is not None:
                            self.chunks[c["next"]]["prev"] = q
                        c["next"] = q
                        c["size"] = rounded
                    c["in_use"] = True
                    self.in_use += c["size"]
                    self.max_in_use = max(self.max_in_use, self.in_use)
                    return p
        return None

    def extend(self, rounded):
        increased = False
        while rounded > self.curr:
            self.curr *= 2
            increased = True
        size = self.curr
        if not increased:
            self.curr = self.curr * 2 if self.curr < self.max_pow2 // 2 else self.max_pow2
        base = self.next_base
        self.next_base += size + (1 << 30)  # regions are not adjacent
        self.chunks[base] = {"size": size, "in_use": False, "prev": None, "next": None}

    def alloc(self, key, n):
        r = self.rounded(n)
        p = self.find(r)
        if p is None:
            self.extend(r)
            p = self.find(r)
        self.ptr_of[key] = p

    def free(self, key):
        p = self.ptr_of.pop(key)
        c = self.chunks[p]
        c["in_use"] = False
        self.in_use -= c["size"]
        nx = c["next"]
        if nx is not None and not self.chunks[nx]["in_use"]:
            n2 = self.chunks.pop(nx)
            c["size"] += n2["size"]
            c["next"] = n2["next"]
            if n2["next"] is not None:
                self.chunks[n2["next"]]["prev"] = p
        pv = c["prev"]
        if pv is not None and not self.chunks[pv]["in_use"]:
            cp = self.chunks[pv]
            self.chunks.pop(p)
            cp["size"] += c["size"]
            cp["next"] = c["next"]
            if c["next"] is not None:
                self.chunks[c["next"]]["prev"] = pv


def predict_peak(model, order=None):
    a = Arena()
    for ev in plan_and_trace(model, order):
        if ev[0] == "alloc":
            a.alloc(ev[1], ev[2])
        else:
            a.free(ev[1])
    return a.max_in_use


def naive_peak(model, order=None):
    """Sum of live requested bytes (no rounding, no arena) for comparison."""
    live, peak = 0, 0
    sizes = {}
    for ev in plan_and_trace(model, order):
        if ev[0] == "alloc":
            sizes[ev[1]] = ev[2]; live += ev[2]; peak = max(peak, live)
        else:
            live -= sizes[ev[1]]
    return peak


# ---------------------------------------------------------------- random graphs
UNARY = ["Neg", "Abs", "Exp", "Relu", "Sigmoid", "Tanh", "Reshape2"]
BINARY = ["Add", "Mul", "Sub"]


def random_model(rng, R, C):
    nodes, produced = [], []
    inits = [numpy_helper.from_array(np.array([R * C], np.int64), "flat"),
             numpy_helper.from_array(np.array([R, C], np.int64), "back")]
    n_nodes = rng.randint(3, 25)
    for k in range(n_nodes):
        def pick():
            if produced and rng.random() < 0.85:
                return produced[max(0, len(produced) - 1 - int(rng.expovariate(0.6)))]
            return "x"
        out = f"t{k}"
        if rng.random() < 0.5:
            op = rng.choice(UNARY)
            if op == "Reshape2":
                nodes.append(helper.make_node("Reshape", [pick(), "flat"], [out + "f"], name=out + "f"))
                nodes.append(helper.make_node("Reshape", [out + "f", "back"], [out], name=out))
            else:
                nodes.append(helper.make_node(op, [pick()], [out], name=out))
        else:
            nodes.append(helper.make_node(rng.choice(BINARY), [pick(), pick()], [out], name=out))
        produced.append(out)
    consumed = {i for n in nodes for i in n.input}
    # unconsumed tensors: usually reduced into a small graph output, sometimes left dead or output whole
    outs = []
    for t in produced:
        if t in consumed:
            if rng.random() < 0.05:
                outs.append((t, [R, C]))
            continue
        r = rng.random()
        if r < 0.6:
            nodes.append(helper.make_node("ReduceSum", [t], [t + "s"], keepdims=0, name=t + "s"))
            outs.append((t + "s", []))
        elif r < 0.8:
            outs.append((t, [R, C]))
        # else: dead tensor
    if not outs:
        nodes.append(helper.make_node("ReduceSum", [produced[-1]], ["ys"], keepdims=0, name="ys"))
        outs.append(("ys", []))
    vi = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
    g = helper.make_graph(nodes, "g", [vi("x", [R, C])], [vi(o, s) for o, s in outs], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    m = shape_inference.infer_shapes(m)  # needs topological file order, so shuffle afterwards
    if rng.random() < 0.7:
        shuffled = list(m.graph.node)
        rng.shuffle(shuffled)
        del m.graph.node[:]
        m.graph.node.extend(shuffled)
    return m


def measure(m, R, C, level):
    with tempfile.NamedTemporaryFile(suffix=".onnx", delete=False) as f:
        f.write(m.SerializeToString())
        path = f.name
    try:
        out = subprocess.run([MEMPROBE, path, f"opt={level}", f"x:{R}x{C}"], capture_output=True, text=True,
                             check=True)
    finally:
        os.remove(path)
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_bytes"]


def main():
    n_graphs = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    level = sys.argv[3] if len(sys.argv) > 3 else "disable"
    rng = random.Random(seed)
    exact = 0
    naive_exact = 0
    worst = 0.0
    for gi in range(n_graphs):
        R = rng.choice([256, 512, 1000, 1024, 1500, 3000])
        C = rng.choice([256, 700, 1024])
        m = random_model(rng, R, C)
        got = measure(m, R, C, level)
        order = None
        if level != "disable":
            # simulate the graph ORT runs: its optimized model, saved in execution order
            from ort_order import make_session
            opt_path = os.path.join(tempfile.mkdtemp(prefix="simopt"), "opt.onnx")
            make_session(m.SerializeToString(), level=level, profile=False, optimized_path=opt_path)
            opt = onnx.load(opt_path)
            if [n.name for n in opt.graph.node] != [n.name for n in m.graph.node]:
                # a transformer changed the graph: ORT re-serialized it in execution order
                m = shape_inference.infer_shapes(opt)
                order = list(range(len(m.graph.node)))
            # else: unchanged graphs are saved as given, keep the emulated order
        pred = predict_peak(m, order)
        naive = naive_peak(m, order)
        exact += got == pred
        naive_exact += got == naive
        worst = max(worst, abs(got - pred) / max(got, 1))
        if got != pred:
            print(f"graph {gi} R={R} C={C}: measured {got} predicted {pred} (naive {naive})")
    print(f"level={level} seed={seed}: arena-simulated peak == measured MaxInUse on {exact}/{n_graphs} graphs "
          f"(worst relative error {worst:.3%}); naive sum-of-live-bytes equal on {naive_exact}/{n_graphs}")


if __name__ == "__main__":
    main()
