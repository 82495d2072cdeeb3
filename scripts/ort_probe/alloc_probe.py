"""Arena experiments: which ops run in place / alias, when buffers are freed, how bytes are rounded.

Needs onnx (e.g. /work/tmp/venv-fx/bin/python) and the `memprobe` helper binary: a tiny Rust program
over ckpt_runtime::measure_peak (fresh session, level basic, CSE off, memory pattern off, 1 thread)
that prints {"peak_bytes": MaxInUse - InUse_after_load, ...}. Build it with
`export MEMPROBE=$(bash scripts/ort_probe/memprobe/build.sh)`.

Every graph has one float input x of N floats (S = 4N bytes, N odd so rounding shows) and, unless
noted, ends in ReduceSum so the graph output is tiny. We compare the measured peak with the predicted
count of live S-sized buffers.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from onnx import TensorProto, helper, numpy_helper

R, C = 1024, 1024  # x is [R, C] float: S = 4 MiB, exactly one arena region, so counts are clean
N = R * C
S = 4 * N
ROUND = lambda b: (b + 255) // 256 * 256
MEMPROBE = os.environ.get("MEMPROBE", "/tmp/memprobe/target/debug/memprobe")  # see memprobe/build.sh


def model(nodes, outputs, inits=(), opset=17, out_shapes=None):
    vi = lambda n, shape: helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
    outs = [vi(o, (out_shapes or {}).get(o)) for o in outputs]
    g = helper.make_graph(nodes, "g", [vi("x", [R, C])], outs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def measure(m, level="basic"):
    with tempfile.NamedTemporaryFile(suffix=".onnx", delete=False) as f:
        f.write(m.SerializeToString())
        path = f.name
    try:
        out = subprocess.run([MEMPROBE, path, f"opt={level}", f"x:{R}x{C}"], capture_output=True, text=True, check=True)
    finally:
        os.remove(path)
    return json.loads(out.stdout.strip().splitlines()[-1])


def n(op, ins, outs, **kw):
    return helper.make_node(op, ins, outs, name=outs[0], **kw)


def rsum(src, out="y"):
    return n("ReduceSum", [src], [out], keepdims=0)


shape_init = numpy_helper.from_array(np.array([N], np.int64), "shp")
axes0 = numpy_helper.from_array(np.array([0], np.int64), "ax0")
wmat = numpy_helper.from_array(np.zeros((C, C), np.float32), "W")
scale = numpy_helper.from_array(np.ones((C,), np.float32), "gamma")
idx_e = numpy_helper.from_array(np.zeros((1, C), np.int64), "idx_e")
upd_e = numpy_helper.from_array(np.ones((1, C), np.float32), "upd_e")
idx_nd = numpy_helper.from_array(np.zeros((1, 1), np.int64), "idx_nd")
upd_nd = numpy_helper.from_array(np.ones((1, C), np.float32), "upd_nd")
cond = numpy_helper.from_array(np.ones((R, C), bool), "cond")
zero = numpy_helper.from_array(np.zeros((1,), np.float32), "zero")
full_shape = numpy_helper.from_array(np.array([R, C], np.int64), "full_shape")
pads0 = numpy_helper.from_array(np.zeros((4,), np.int64), "pads0")
st = numpy_helper.from_array(np.array([0], np.int64), "st")
en = numpy_helper.from_array(np.array([R], np.int64), "en")
ax1 = numpy_helper.from_array(np.array([0], np.int64), "axs")

UNARY = {
    # op: (extra inputs, attrs, inits)
    "Neg": ([], {}, []), "Abs": ([], {}, []), "Exp": ([], {}, []), "Sqrt": ([], {}, []),
    "Relu": ([], {}, []), "Sigmoid": ([], {}, []), "Tanh": ([], {}, []), "LeakyRelu": ([], {}, []),
    "Elu": ([], {}, []), "Softplus": ([], {}, []), "Erf": ([], {}, []), "Gelu": ([], {}, []),
    "Cast": ([], {"to": TensorProto.FLOAT}, []), "Identity": ([], {}, []),
    "Reshape": (["shp"], {}, [shape_init]), "Unsqueeze": (["ax0"], {}, [axes0]),
    "Flatten": ([], {"axis": 0}, []), "Softmax": ([], {"axis": -1}, []), "LogSoftmax": ([], {"axis": -1}, []),
    "Dropout": ([], {}, []), "Clip": ([], {}, []), "Transpose": ([], {"perm": [1, 0]}, []),
    "MatMul": (["W"], {}, [wmat]), "LayerNormalization": (["gamma"], {"axis": -1}, [scale]),
    "Reciprocal": ([], {}, []), "Log": ([], {}, []), "HardSigmoid": ([], {}, []),
    "ScatterElements": (["idx_e", "upd_e"], {"axis": 0}, [idx_e, upd_e]),
    "ScatterND": (["idx_nd", "upd_nd"], {}, [idx_nd, upd_nd]),
    "Where": (None, {}, [cond, zero]), "Expand": (["full_shape"], {}, [full_shape]),
    "Pad": (["pads0"], {}, [pads0]), "Slice": (["st", "en", "axs"], {}, [st, en, ax1]),
    "Trilu": ([], {}, []), "Round": ([], {}, []), "Floor": ([], {}, []), "Selu": ([], {}, []),
    "Shrink": ([], {}, []), "ThresholdedRelu": ([], {}, []), "Celu": ([], {}, []), "Mish": ([], {}, []),
}
BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum"]


def main():
    level = sys.argv[1] if len(sys.argv) > 1 else "basic"
    global measure
    _measure = measure
    measure = lambda m: _measure(m, level)
    print(f"level={level}")
    results = []
    base = measure(model([n("Neg", ["x"], ["a"]), rsum("a")], ["y"], out_shapes={"y": []}))
    small = base["peak_bytes"] - ROUND(S)
    print(f"N={N} floats, S={S} B, rounded S={ROUND(S)} B; Neg->ReduceSum peak={base['peak_bytes']} "
          f"(= rounded S + {small} B for the small output)")
    print("\n# unary U in  a=Neg(x); b=U(a); y=ReduceSum(b)   (1 buffer => U reuses/aliases a; 2 => new buffer)")
    for op, (extra, attrs, inits) in UNARY.items():
        opset = 20 if op in ("Gelu", "Mish") else 17
        ins = ["cond", "a", "zero"] if extra is None else ["a"] + extra
        m = model([n("Neg", ["x"], ["a"]), n(op, ins, ["b"], **attrs), rsum("b")], ["y"], inits,
                  opset=opset, out_shapes={"y": []})
        try:
            p = measure(m)["peak_bytes"]
            bufs = (p - small) / ROUND(S)
            print(f"  {op:10s} peak={p:>9d}  buffers={bufs:.3f}")
            results.append(("unary", op, p, bufs))
        except subprocess.CalledProcessError as e:
            print(f"  {op:10s} failed: {e.stderr.strip()[-200:]}")
    print("\n# binary B in  a=Neg(x); c=Abs(x); d=B(a,c); y=ReduceSum(d)  (2 => in place on an input; 3 => new)")
    for op in BINARY:
        m = model([n("Neg", ["x"], ["a"]), n("Abs", ["x"], ["c"]), n(op, ["a", "c"], ["d"]), rsum("d")], ["y"],
                  out_shapes={"y": []})
        p = measure(m)["peak_bytes"]
        bufs = (p - small) / ROUND(S)
        print(f"  {op:10s} peak={p:>9d}  buffers={bufs:.3f}")
        results.append(("binary", op, p, bufs))

    print("\n# lifetime experiments")
    cases = {
        # a is read by b only: freed right after b => c can take a's buffer: 2 buffers
        "chain Neg x3": ([n("Neg", ["x"], ["a"]), n("Neg", ["a"], ["b"]), n("Neg", ["b"], ["c"]), rsum("c")], ["y"]),
        # a is also a graph output: it is never freed nor reused => 3 buffers
        "chain, a is graph output": ([n("Neg", ["x"], ["a"]), n("Neg", ["a"], ["b"]), n("Neg", ["b"], ["c"]),
                                      rsum("c")], ["y", "a"]),
        # fan-out: a read by b and (later) c: a lives until c
        "fan-out a->(b, c), d=Add(b,c)": ([n("Neg", ["x"], ["a"]), n("Neg", ["a"], ["b"]), n("Abs", ["a"], ["c"]),
                                           n("Add", ["b", "c"], ["d"]), rsum("d")], ["y"]),
        # dead 2S tensor (consumed by nobody, not an output) written last in the file => runs first;
        # if it were freed after its step the peak would be 2S (the chain); if it lives to the end, 2S+2S
        "dead 2S tensor runs first": ([n("Neg", ["x"], ["b"]), n("Neg", ["b"], ["c"]), rsum("c"),
                                       n("Concat", ["x", "x"], ["dead"], axis=0)], ["y"]),
        # output of size 2S reuse: a different-size buffer is never reused (exact size match)
        "size mismatch no reuse": ([n("Concat", ["x", "x"], ["a"], axis=0), n("ReduceSum", ["a"], ["s"], keepdims=1),
                                    n("Neg", ["x"], ["b"]), n("Add", ["b", "s"], ["c"]), n("Neg", ["c"], ["d"]),
                                    rsum("d")], ["y"]),
        # in place needs the input's last use: a also read later by c => Relu gets a new buffer
        "Relu input read later (no in-place)": ([n("Neg", ["x"], ["a"]), n("Relu", ["a"], ["b"]),
                                                 n("Add", ["a", "b"], ["c"]), rsum("c")], ["y"]),
        # in place on a graph input never happens (the caller owns x)
        "Relu on graph input x": ([n("Relu", ["x"], ["b"]), n("Neg", ["b"], ["c"]), rsum("c")], ["y"]),
        # in place through an alias: r = Reshape(a) shares a's buffer; Relu(r) is the buffer's last use
        "Reshape then Relu": ([n("Neg", ["x"], ["a"]), n("Reshape", ["a", "shp"], ["r"]), n("Relu", ["r"], ["b"]),
                               rsum("b")], ["y"]),
        # alias keeps the buffer alive: r = Reshape(a) read after a's other uses
        "alias extends lifetime": ([n("Neg", ["x"], ["a"]), n("Reshape", ["a", "shp"], ["r"]),
                                    n("Neg", ["a"], ["b"]), n("Neg", ["b"], ["c"]), n("ReduceSum", ["r"], ["s"], keepdims=0),
                                    n("Add", ["c", "s"], ["d"]), rsum("d")], ["y"]),
        # Relu whose output is a graph output: never in place (outputs get their own buffer)
        "Relu output is graph output": ([n("Neg", ["x"], ["a"]), n("Relu", ["a"], ["b"])], ["b"]),
    }
    for name, (nodes, outs) in cases.items():
        m = model(nodes, outs, inits=[shape_init] if "Reshape" in name or "alias" in name else [],
                  out_shapes={"y": [], "a": [R, C], "b": [R, C]})
        p = measure(m)["peak_bytes"]
        print(f"  {name:34s} peak={p:>9d}  S-buffers={(p - small) / ROUND(S):.3f}")


if __name__ == "__main__":
    main()
