"""Check the order emulation on the real training-graph fixtures (tests/fixtures/*.onnx).

For each fixture: run once in ORT (level basic, CSE off, profiling), then
 (a) rebuild the graph ORT actually ran (its optimized model, with ORT's node indices taken
     from the profile) and compare ort_default_order() on it with the profiled order;
 (b) compare ort_default_order() on the file's own node list (what the IR sees) with the
     profiled order, restricted to nodes that survived the level-1 transformers.
Usage: python fixtures_order.py [LEVEL]
"""
import glob
import json
import os
import sys
import tempfile

import numpy as np
import onnx

from ort_order import make_session, ort_default_order, ort_default_order_sparse, profiled_order

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def feeds_for(sess, fixture):
    rng = np.random.default_rng(0)
    ranges = {d["name"]: d for d in fixture.get("data_inputs", [])} if fixture else {}
    dims = (fixture or {}).get("symbolic_dims", {})
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else dims.get(d, 2) for d in i.shape]
        if "int" in i.type:
            lo, hi = ranges.get(i.name, {}).get("range", [0, 2])
            feeds[i.name] = rng.integers(lo, hi, size=shape).astype(np.int64 if "64" in i.type else np.int32)
        elif "bool" in i.type:
            feeds[i.name] = np.ones(shape, bool)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def main():
    level = sys.argv[1] if len(sys.argv) > 1 else "basic"
    manifest = json.load(open(os.path.join(ROOT, "tests/fixtures/manifest.json")))
    by_file = {os.path.basename(f["file"]): f for f in manifest["fixtures"]}
    tmp = tempfile.mkdtemp(prefix="fixorder")
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/*.onnx"))):
        name = os.path.basename(path)
        model = onnx.load(path)
        file_nodes = [n for n in model.graph.node if n.op_type != "Constant"]
        opt_path = os.path.join(tmp, name)
        try:
            sess = make_session(path, level=level, optimized_path=opt_path)
            got = profiled_order(sess, feeds_for(sess, by_file.get(name)))
        except Exception as e:  # e.g. training ops missing from the inference wheel
            print(f"{name:28s} skipped: {str(e).splitlines()[0][:110]}")
            continue
        got_idx = [g[0] for g in got]
        opt = onnx.load(opt_path)
        # ORT saves the optimized model's nodes in its execution order (Graph::ToGraphProto walks
        # GraphViewer's topological order): the k-th saved node is the k-th node run.
        saved_in_exec_order = len(opt.graph.node) == len(got) and all(
            n.op_type == g[2] and (n.name == g[1] or not n.name) for n, g in zip(opt.graph.node, got))
        name_to_idx = {nm: idx for idx, nm, _ in got}
        post = [None] * (max(got_idx) + 1)
        if not saved_in_exec_order and any(n.name not in name_to_idx for n in opt.graph.node):
            missing = [(n.name, n.op_type) for n in opt.graph.node if n.name not in name_to_idx][:3]
            print(f"{name:28s} saved graph has nodes the profile does not name: {missing}")
            continue
        if False:
            print(f"{name:28s} cannot map the saved graph onto ORT's node indices (unnamed nodes)")
            continue
        for k, n in enumerate(opt.graph.node):
            idx = got_idx[k] if saved_in_exec_order else name_to_idx[n.name]
            post[idx] = {"inputs": list(n.input), "outputs": list(n.output)}
        file_names = {n.name for n in file_nodes}
        ran_names = {g[1] for g in got}
        removed = sorted({n.op_type for n in file_nodes if n.name not in ran_names})
        added = sorted({g[2] for g in got if g[1] not in file_names})
        emu_post = ort_default_order_sparse(post)
        # (b) on the file graph: ORT index = file position without Constant nodes
        emu_file = ort_default_order([{"inputs": list(n.input), "outputs": list(n.output)} for n in file_nodes])
        same_name = {i for i, n in enumerate(file_nodes) if i in name_to_idx.values() and name_to_idx.get(n.name) == i}
        emu_file_surv = [i for i in emu_file if i in same_name]
        got_surv = [i for i in got_idx if i in same_name]
        changed = len(file_nodes) - len(same_name) + sum(1 for i in got_idx if i not in same_name)
        print(f"{name:28s} nodes file={len(file_nodes):4d} ran={len(got_idx):4d} "
              f"(changed by transformers: {changed:3d}) | emulation on ORT's graph: "
              f"{'MATCH' if emu_post == got_idx else 'MISMATCH'} | on the file graph, surviving nodes: "
              f"{'MATCH' if emu_file_surv == got_surv else 'MISMATCH'} | saved optimized model in run order: "
              f"{saved_in_exec_order}\n{'':28s} removed ops: {removed}; new ops: {added}")


if __name__ == "__main__":
    main()
