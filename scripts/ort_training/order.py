"""Prints the nodes of a model in the order ONNX Runtime's Python package runs them (its
profiler's node events of one run at level disable, one thread, memory pattern off), one
name per line, for ckpt-opt's order checks (tests/training.rs).

    python order.py MODEL [DIM=VALUE ...]

Every input is fed zeros of its type, with symbolic dims bound by DIM=VALUE: the order does
not depend on values.
"""

import json
import os
import sys
import tempfile

import numpy as np
import onnxruntime as ort

TYPES = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64}


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: order.py MODEL [DIM=VALUE ...]")
    dims = dict(kv.split("=", 1) for kv in sys.argv[2:])
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.enable_mem_pattern = False
    so.intra_op_num_threads = 1
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        so.profile_file_prefix = os.path.join(tmp, "order")
        sess = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
        feeds = {}
        for i in sess.get_inputs():
            shape = [d if isinstance(d, int) else int(dims[d]) for d in i.shape]
            elem = {"tensor(float)": 1, "tensor(int32)": 6, "tensor(int64)": 7,
                    "tensor(bool)": 9, "tensor(float16)": 10, "tensor(double)": 11}[i.type]
            feeds[i.name] = np.zeros(shape, dtype=TYPES[elem])
        sess.run(None, feeds)
        with open(sess.end_profiling()) as f:
            events = json.load(f)
    suffix = "_kernel_time"
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith(suffix):
            print(e["name"][: -len(suffix)])


if __name__ == "__main__":
    main()
