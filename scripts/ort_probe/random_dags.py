"""Random-DAG experiment: does ort_default_order() match ORT's profiled order?

Usage: python random_dags.py [N_GRAPHS] [SEED] [LEVEL] [--dump cases.json]
Builds N random DAGs of elementwise/MatMul ops over [4,4] float tensors, with the
node list written in a shuffled (often non-topological) file order, runs each once
in ORT with profiling and compares the executed node indices with the emulation.
With --dump, writes the graphs (as producer-index lists) and ORT's order to JSON so
the Rust implementation can be checked against the same data.
"""
import json
import os
import tempfile
import random
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnx
from ort_order import make_session, ort_default_order, ort_default_order_sparse, profiled_order

UNARY = ["Relu", "Sigmoid", "Neg", "Tanh", "Abs"]
BINARY = ["Add", "Mul", "Sub", "MatMul"]


def random_graph(rng, n_nodes, n_inputs, shuffle):
    tensors = [f"in{i}" for i in range(n_inputs)]
    inits = []
    if rng.random() < 0.5:
        w = numpy_helper.from_array(rng_np(rng).standard_normal((4, 4)).astype(np.float32), "W")
        inits.append(w)
    pool = list(tensors) + [i.name for i in inits]
    consts = []
    if rng.random() < 0.3:
        # Constant nodes: ORT turns them into initializers and gives them no node index
        for c in range(rng.randint(1, 2)):
            val = numpy_helper.from_array(np.full((4, 4), 0.5 + c, np.float32), f"K{c}")
            consts.append(helper.make_node("Constant", [], [f"K{c}"], value=val, name=f"const{c}"))
            pool.append(f"K{c}")
    inits.append(numpy_helper.from_array(np.array([4, 4], np.int64), "split44"))
    nodes = []
    extra_outputs = []
    for k in range(n_nodes):
        produced = [f"t{j}" for j in range(k)]
        def pick():
            if produced and rng.random() < 0.85:
                # bias towards recent tensors, but allow long skips
                if rng.random() < 0.6:
                    return produced[max(0, len(produced) - 1 - int(rng.expovariate(0.5)))]
                return rng.choice(produced)
            return rng.choice(pool)
        r = rng.random()
        if r < 0.08 and k + 1 < n_nodes:
            # multi-output node: Concat two tensors to [8,4], Split back into two [4,4]
            nodes.append(helper.make_node("Concat", [pick(), pick()], [f"c{k}"], axis=0, name=f"cat{k}"))
            nodes.append(helper.make_node("Split", [f"c{k}", "split44"], [f"t{k}", f"s{k}"], axis=0, name=f"n{k}"))
            extra_outputs.append(f"s{k}")
            continue
        if rng.random() < 0.45:
            op = rng.choice(UNARY)
            ins = [pick()]
        else:
            op = rng.choice(BINARY)
            ins = [pick(), pick()]
        nodes.append(helper.make_node(op, ins, [f"t{k}"], name=f"n{k}"))
    consumed = {i for n in nodes for i in n.input}
    outputs = [o for n in nodes for o in n.output if o not in consumed and (o.startswith("t") or rng.random() < 0.5)]
    # also expose a few consumed tensors as graph outputs
    for n in nodes:
        if n.output[0] in consumed and rng.random() < 0.1:
            outputs.append(n.output[0])
    for c in consts:
        nodes.insert(rng.randint(0, len(nodes)), c)
    if shuffle:
        rng.shuffle(nodes)
    vi = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [8, 4] if name.startswith("c") else [4, 4])
    g = helper.make_graph(nodes, "g", [vi(t) for t in tensors], [vi(o) for o in outputs], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


_np = {}
def rng_np(rng):
    return np.random.default_rng(rng.randrange(1 << 30))


def graph_as_lists(model):
    nodes = [{"inputs": list(n.input), "outputs": list(n.output), "op": n.op_type, "name": n.name}
             for n in model.graph.node if n.op_type != "Constant"]
    return nodes


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n_graphs = int(args[0]) if args else 200
    seed = int(args[1]) if len(args) > 1 else 1
    level = args[2] if len(args) > 2 else "basic"
    dump = None
    if "--dump" in sys.argv:
        dump = sys.argv[sys.argv.index("--dump") + 1]
    rng = random.Random(seed)
    matched = 0
    untransformed = 0
    n_transformed = 0
    matched_transformed = 0
    tmpdir = tempfile.mkdtemp(prefix="dags")
    file_order_matched = 0
    cases = []
    for gi in range(n_graphs):
        n_nodes = rng.randint(2, 40)
        m = random_graph(rng, n_nodes, rng.randint(1, 3), shuffle=rng.random() < 0.8)
        nodes = graph_as_lists(m)
        opt_path = os.path.join(tmpdir, "opt.onnx")
        sess = make_session(m.SerializeToString(), level=level, optimized_path=opt_path)
        feeds = {i.name: np.ones((4, 4), np.float32) for i in sess.get_inputs()}
        got = profiled_order(sess, feeds)
        got_idx = [g[0] for g in got]
        got_names = [g[1] for g in got]
        transformed = sorted(got_names) != sorted(n["name"] for n in nodes)
        if not transformed:
            # ORT's node index = position in the file's node list (Constant nodes excluded)
            for idx, name, op in got:
                assert nodes[idx]["name"] == name, (idx, name, nodes[idx]["name"])
            emu = ort_default_order(nodes)
            ok = emu == got_idx
            matched += ok
            untransformed += 1
            file_order_matched += got_idx == list(range(len(nodes)))
            if not ok:
                print(f"graph {gi}: MISMATCH\n  ort={got_idx}\n  emu={emu}")
        else:
            # A level-1 transformer removed/added nodes. Rebuild the transformed graph with
            # ORT's own node indices (from the profile) and emulate on that.
            if not got:
                continue  # everything was constant-folded
            n_transformed += 1
            opt = onnx.load(opt_path)
            name_to_idx = {name: idx for idx, name, _ in got}
            post = [None] * (max(got_idx) + 1)
            for n in opt.graph.node:
                post[name_to_idx[n.name]] = {"inputs": list(n.input), "outputs": list(n.output), "name": n.name}
            emu = ort_default_order_sparse(post)
            ok = emu == got_idx
            matched_transformed += ok
            if not ok:
                print(f"graph {gi} (transformed): MISMATCH\n  ort={got_idx}\n  emu={emu}")
        if transformed:
            continue
        producer = {o: i for i, n in enumerate(nodes) for o in n["outputs"]}
        cases.append({
            "inputs": [[producer.get(t) for t in n["inputs"]] for n in nodes],
            "graph_outputs": [producer[o.name] for o in m.graph.output],
            "ort_order": got_idx,
        })
    print(f"level={level} seed={seed}: untransformed graphs: {matched}/{untransformed} emulated orders match "
          f"ORT's profile ({file_order_matched} of them equal file order); graphs changed by level-1 "
          f"transformers: {matched_transformed}/{n_transformed} match when emulated on the transformed graph "
          f"with ORT's node indices")
    if dump:
        with open(dump, "w") as f:
            json.dump(cases, f)


if __name__ == "__main__":
    main()
