"""Truth test on the real fixtures: the allocation model of docs/design/ort-internals.md (alloc_sim.py)
against ORT's measured arena peak (MaxInUse - InUse after load, memory pattern off).

Usage: MEMPROBE=... python fixtures_mem.py [LEVEL] [EXTRA.onnx ...]
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

import onnx
from onnx import shape_inference

import alloc_sim as A
from fixtures_order import feeds_for
from ort_order import make_session, profiled_order

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def main():
    level = sys.argv[1] if len(sys.argv) > 1 else "basic"
    manifest = json.load(open(os.path.join(ROOT, "tests/fixtures/manifest.json")))
    by_file = {os.path.basename(f["file"]): f for f in manifest["fixtures"]}
    tmp = tempfile.mkdtemp(prefix="fixmem")
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/*.onnx"))) + sys.argv[2:]:
        name = os.path.basename(path)
        fx = by_file.get(name, {})
        if fx.get("kind") == "ort_artifact":
            continue
        m = onnx.load(path)
        inits = {i.name for i in m.graph.initializer}
        ranges = {d["name"]: d.get("range", [0, 2]) for d in fx.get("data_inputs", [])}
        specs = []
        for i in m.graph.input:
            if i.name in inits:
                continue
            dims = "x".join(str(d.dim_value) for d in i.type.tensor_type.shape.dim)
            if i.type.tensor_type.elem_type == onnx.TensorProto.INT64:
                lo, hi = ranges.get(i.name, [0, 2])
                specs.append(f"{i.name}:i64:{dims}:{lo}:{hi}")
            else:
                specs.append(f"{i.name}:{dims}")
        try:
            out = subprocess.run([A.MEMPROBE, path, f"opt={level}"] + specs, capture_output=True, text=True,
                                 check=True)
        except subprocess.CalledProcessError as e:
            print(f"{name:26s} measure failed: {e.stderr.strip().splitlines()[-1][:120]}")
            continue
        measured = json.loads(out.stdout.strip().splitlines()[-1])["peak_bytes"]
        # simulate the graph ORT ran (level-1 transformers, function inlining, Constant removal), in
        # the order ORT ran it: its saved optimized model, ordered by a profiled run
        opt_path = os.path.join(tmp, name)
        sess = make_session(path, level=level, profile=True, optimized_path=opt_path)
        ran = profiled_order(sess, feeds_for(sess, fx))
        opt = onnx.load(opt_path)
        sim_model = shape_inference.infer_shapes(opt)
        if all(n.op_type == r[2] and (n.name == r[1] or not n.name) for n, r in zip(opt.graph.node, ran)) \
                and len(ran) == len(opt.graph.node):
            order = list(range(len(opt.graph.node)))
        else:
            pos = {n.name: k for k, n in enumerate(opt.graph.node)}
            order = [pos[r[1]] for r in ran]
        try:
            pred = A.predict_peak(sim_model, order)
            naive = A.naive_peak(sim_model, order)
        except KeyError as e:
            print(f"{name:26s} measured {measured:>9d}  sim failed: no shape for {e}")
            continue
        print(f"{name:26s} measured {measured:>9d}  predicted {pred:>9d} ({(pred - measured) / measured:+.2%})"
              f"  naive live bytes {naive:>9d} ({(naive - measured) / measured:+.2%})")


if __name__ == "__main__":
    main()
