"""The loss head's and the embedding gradient's rewrites, measured on ONNX Runtime's CPU EP.

Each case is a pair (or a set) of graphs computing the same values. For each graph the probe
prints the smallest arena its run fits in (bisection on an env allocator's `max_mem`, level
disable, memory pattern off, one thread, 4 KiB resolution) and whether its outputs are bitwise
equal to the first graph's.

    python scripts/ort_probe/loss_head_probe.py

Cases:
  embedding  the embedding gradient written as a graph output: ScatterND(add) over a zeros
             table; ScatterElements(add) over it (which may run in place); ScatterElements
             into an inner value and an Identity to the output.
  transpose  a weight gradient MatMul(Transpose(dY), X) against Gemm(dY, X, transA=1).
  slice      the gradient of a Slice that drops the last position, as the exporter writes it
             (zeros, two Transposes, a ScatterND and a Transpose back) against one Pad.
"""
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper as h

V, D, T = 4096, 256, 512  # vocabulary, width, tokens: the table is 4 MiB, dY 8 MiB
B, S = 2, 64  # batch and sequence of the slice case (S - 1 positions sliced)


def model(nodes, inputs, outputs, inits=()):
    g = h.make_graph(nodes, "probe", inputs, outputs, list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 9
    onnx.checker.check_model(m, full_check=True)
    return m.SerializeToString()


def f32(name, shape):
    return h.make_tensor_value_info(name, TP.FLOAT, shape)


def i64(name, shape):
    return h.make_tensor_value_info(name, TP.INT64, shape)


def embedding(kind):
    inits = [h.make_tensor("shape", TP.INT64, [2], [V, D]), h.make_tensor("eshape", TP.INT64, [2], [T, D])]
    zeros = h.make_node("ConstantOfShape", ["shape"], ["zeros"], value=h.make_tensor("v", TP.FLOAT, [1], [0.0]))
    expand = h.make_node("Expand", ["idx", "eshape"], ["eidx"])
    nodes = {
        "ScatterND over zeros": [zeros, h.make_node("ScatterND", ["zeros", "idx", "upd"], ["grad"], reduction="add")],
        "ScatterElements over zeros": [zeros, expand, h.make_node("ScatterElements", ["zeros", "eidx", "upd"], ["grad"], axis=0, reduction="add")],
        "ScatterElements, Identity": [zeros, expand, h.make_node("ScatterElements", ["zeros", "eidx", "upd"], ["s"], axis=0, reduction="add"), h.make_node("Identity", ["s"], ["grad"])],
    }[kind]
    return model(nodes, [i64("idx", [T, 1]), f32("upd", [T, D])], [f32("grad", [V, D])], inits)


def transpose(kind):
    nodes = {
        "MatMul(Transpose(dY), X)": [h.make_node("Transpose", ["dy"], ["t"], perm=[1, 0]), h.make_node("MatMul", ["t", "x"], ["g"])],
        "Gemm(dY, X, transA=1)": [h.make_node("Gemm", ["dy", "x"], ["g"], transA=1)],
    }[kind]
    return model(nodes, [f32("dy", [T, V]), f32("x", [T, D])], [f32("g", [V, D])])


def slice_grad(kind):
    inits = [
        h.make_tensor("shape", TP.INT64, [3], [B, S, V]),
        h.make_tensor("positions", TP.INT64, [S - 1, 1], list(range(S - 1))),
        h.make_tensor("pads", TP.INT64, [6], [0, 0, 0, 0, 1, 0]),
    ]
    nodes = {
        "zeros, Transposes, ScatterND": [
            h.make_node("ConstantOfShape", ["shape"], ["zeros"], value=h.make_tensor("v", TP.FLOAT, [1], [0.0])),
            h.make_node("Transpose", ["dy"], ["dy_t"], perm=[1, 0, 2]),
            h.make_node("Transpose", ["zeros"], ["zeros_t"], perm=[1, 0, 2]),
            h.make_node("ScatterND", ["zeros_t", "positions", "dy_t"], ["s_t"]),
            h.make_node("Transpose", ["s_t"], ["s"], perm=[1, 0, 2]),
            h.make_node("Neg", ["s"], ["g"]),
        ],
        "Pad": [h.make_node("Pad", ["dy", "pads"], ["s"]), h.make_node("Neg", ["s"], ["g"])],
    }[kind]
    return model(nodes, [f32("dy", [B, S - 1, V])], [f32("g", [B, S, V])], inits)


CASES = {
    "embedding": (embedding, ["ScatterND over zeros", "ScatterElements over zeros", "ScatterElements, Identity"]),
    "transpose": (transpose, ["MatMul(Transpose(dY), X)", "Gemm(dY, X, transA=1)"]),
    "slice": (slice_grad, ["zeros, Transposes, ScatterND", "Pad"]),
}


def feeds():
    rng = np.random.default_rng(0)
    return {
        "idx": rng.integers(0, V, (T, 1)).astype(np.int64),
        "upd": rng.standard_normal((T, D)).astype(np.float32),
        "dy": None,
        "x": rng.standard_normal((T, D)).astype(np.float32),
    }


def feeds_for(case, session):
    rng = np.random.default_rng(1)
    f = feeds()
    f["dy"] = rng.standard_normal((T, V) if case == "transpose" else (B, S - 1, V)).astype(np.float32)
    names = [i.name for i in session.get_inputs()]
    return {k: v for k, v in f.items() if k in names}


def session(b, cap=None):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.enable_mem_pattern = False
    so.intra_op_num_threads = 1
    so.add_session_config_entry("session.use_deterministic_compute", "1")
    if cap is not None:
        so.add_session_config_entry("session.use_env_allocators", "1")
        mi = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
        ort.create_and_register_allocator(mi, ort.OrtArenaCfg({"max_mem": cap, "arena_extend_strategy": 1}))
    return ort.InferenceSession(b, so, providers=["CPUExecutionProvider"])


def runs_at(case, kind, cap):
    """Whether `kind` of `case` runs in an arena capped at `cap` (a fresh process: an env
    allocator is registered once per process)."""
    args = [sys.executable, __file__, "--run", case, kind, str(cap)]
    return subprocess.run(args, capture_output=True).returncode == 0


def need(case, kind):
    lo, hi = 0, 256 << 20
    while hi - lo > 4096:
        mid = (lo + hi) // 2
        if runs_at(case, kind, mid):
            hi = mid
        else:
            lo = mid
    return hi


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--run":
        case, kind, cap = sys.argv[2], sys.argv[3], int(sys.argv[4])
        make, _ = CASES[case]
        s = session(make(kind), cap)
        try:
            s.run(None, feeds_for(case, s))
        except Exception:  # the cap was too small: ORT names the node that could not allocate
            sys.exit(1)
        sys.exit(0)
    for case, (make, kinds) in CASES.items():
        first = None
        for kind in kinds:
            s = session(make(kind))
            out = s.run(None, feeds_for(case, s))[0]
            first = out if first is None else first
            same = "bitwise equal" if np.array_equal(first, out) else f"max |diff| {np.abs(first - out).max():.3e}"
            print(f"{case:10} {kind:32} need {need(case, kind):>10} B  {same}")


if __name__ == "__main__":
    main()
