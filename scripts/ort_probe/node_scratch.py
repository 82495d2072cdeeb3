"""Per-node kernel scratch on a real graph: run every node of a fixture alone and compare the
arena peak with what the allocation model predicts (its outputs only). A positive difference is
memory the kernel took from the arena for itself during its step.

Each single-node model keeps float inputs as graph inputs (fed by memprobe, so no weight
pre-packing) and bakes integer/bool inputs in as initializers with the values they really have in
the fixture (captured by one ORT run that exposes every intermediate value). Level disable.
Usage: MEMPROBE=... python node_scratch.py tests/fixtures/FILE.onnx
"""
import collections
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper, shape_inference

import alloc_sim as A

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def main():
    path = sys.argv[1]
    manifest = json.load(open(os.path.join(ROOT, "tests/fixtures/manifest.json")))
    fx = {os.path.basename(f["file"]): f for f in manifest["fixtures"]}.get(os.path.basename(path), {})
    ranges = {d["name"]: d.get("range", [0, 2]) for d in fx.get("data_inputs", [])}
    m = shape_inference.infer_shapes(onnx.load(path))
    g = m.graph
    vi = {v.name: v for v in list(g.value_info) + list(g.output) + list(g.input)}
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    for n in g.node:  # Constant nodes: their values are initializers for our purposes
        if n.op_type == "Constant":
            inits[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    # 1. capture every intermediate value
    rng = np.random.default_rng(0)
    feeds = {}
    for i in g.input:
        if i.name in inits:
            continue
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.type.tensor_type.elem_type == TensorProto.INT64:
            lo, hi = ranges.get(i.name, [0, 2])
            feeds[i.name] = rng.integers(lo, hi, size=shape).astype(np.int64)
        else:
            feeds[i.name] = (rng.standard_normal(shape) * 0.02).astype(np.float32)
    full = onnx.ModelProto()
    full.CopyFrom(m)
    have = {o.name for o in full.graph.output}
    for n in full.graph.node:
        for o in n.output:
            if o and o not in have and o in vi and n.op_type != "Constant":
                full.graph.output.append(vi[o]); have.add(o)
    so = ort.SessionOptions(); so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(full.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    values = dict(zip(names, sess.run(None, feeds)))
    values.update(feeds); values.update(inits)
    # 2. one model per node
    tmp = tempfile.mkdtemp(prefix="nodescratch")
    per_op = collections.defaultdict(list)
    for k, n in enumerate(g.node):
        if n.op_type == "Constant":
            continue
        ins, init_list, specs = [], [], []
        for t in n.input:
            if not t or t in [i.name for i in ins] or t in [x.name for x in init_list]:
                continue
            v = values[t]
            if v.dtype == np.float32 and t not in inits:
                ins.append(helper.make_tensor_value_info(t, TensorProto.FLOAT, list(v.shape)))
                specs.append(f"{t}:{'x'.join(map(str, v.shape))}")
            else:
                init_list.append(numpy_helper.from_array(v, t))
        outs = [vi[o] for o in n.output if o]
        sm = helper.make_model(helper.make_graph([n], "one", ins, outs, initializer=init_list),
                               opset_imports=list(m.opset_import))
        sm.ir_version = m.ir_version
        sm = shape_inference.infer_shapes(sm)
        p = os.path.join(tmp, f"n{k}.onnx")
        onnx.save(sm, p)
        try:
            r = subprocess.run([A.MEMPROBE, p, "opt=disable"] + specs, capture_output=True, text=True, check=True)
        except subprocess.CalledProcessError as e:
            print(f"  node {k} {n.op_type}: failed {e.stderr.strip().splitlines()[-1][:100]}")
            continue
        measured = json.loads(r.stdout.strip().splitlines()[-1])["peak_bytes"]
        predicted = A.predict_peak(sm)
        out_bytes = sum(values[o].nbytes for o in n.output if o)
        per_op[n.op_type].append((measured - predicted, out_bytes, k))
    print(f"{os.path.basename(path)}: per op type, nodes with extra arena bytes during the step")
    for op, rows in sorted(per_op.items()):
        extra = [r for r in rows if r[0] != 0]
        if extra:
            ex = ", ".join(f"n{k}: +{d} B (outputs {ob} B)" for d, ob, k in extra[:4])
            print(f"  {op:22s} {len(extra)}/{len(rows)}  {ex}")
        else:
            print(f"  {op:22s} 0/{len(rows)}")


if __name__ == "__main__":
    main()
