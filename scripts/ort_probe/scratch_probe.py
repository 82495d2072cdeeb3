"""Kernel scratch and a few more ops: measured vs alloc_sim.py (Where, Softmax on a non-last axis, Pow, GatherND, Pad...).

Needs MEMPROBE (see memprobe/build.sh)."""
import sys, numpy as np
sys.path.insert(0, __import__("os").path.dirname(__file__))
from onnx import TensorProto, helper, shape_inference, numpy_helper
import alloc_sim as A
R, C = 1024, 1024; S = 4*R*C
def mk(nodes, inits):
    vi = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
    g = helper.make_graph(nodes, "g", [vi("x", [R, C])], [vi("y", [])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]); m.ir_version = 8
    return shape_inference.infer_shapes(m)
two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
ind = numpy_helper.from_array(np.arange(R, dtype=np.int64).reshape(R, 1), "ind")
pads = numpy_helper.from_array(np.array([0, 0, 1, 0], np.int64), "pads")
cases = {
 "Pow(a, 2)": ([helper.make_node("Pow", ["a", "two"], ["b"])], [two]),
 "GatherND": ([helper.make_node("GatherND", ["a", "ind"], ["b"])], [ind]),
 "Pad": ([helper.make_node("Pad", ["a", "pads"], ["b"])], [pads]),
 "Transpose": ([helper.make_node("Transpose", ["a"], ["b"], perm=[1, 0])], []),
 "LogSoftmax": ([helper.make_node("LogSoftmax", ["a"], ["b"], axis=-1)], []),
 "Softmax ax0": ([helper.make_node("Softmax", ["a"], ["b"], axis=0)], []),
 "MatMul aT": ([helper.make_node("MatMul", ["a", "a"], ["b"])], []),
}
for k, (mid, inits) in cases.items():
    m = mk([helper.make_node("Neg", ["x"], ["a"])] + mid + [helper.make_node("ReduceSum", ["b"], ["y"], keepdims=0)], inits)
    got, pred = A.measure(m, R, C, "disable"), A.predict_peak(m)
    print(f"{k:12s} measured {got} predicted {pred} diff {got - pred}")

def mk_where(nodes, outs, inits):
    vi = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
    g = helper.make_graph(nodes, "g", [vi("x", [R, C])], [vi(o, s) for o, s in outs], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]); m.ir_version = 8
    return shape_inference.infer_shapes(m)
# Where(cond, a, 0): the kernel holds two output-sized temporaries
cond = numpy_helper.from_array(np.ones((R, C), bool), "cond")
condsmall = numpy_helper.from_array(np.ones((1, C), bool), "cs")
zero = numpy_helper.from_array(np.zeros((1,), np.float32), "zero")
for nm, c in [("cond RxC", "cond"), ("cond 1xC", "cs")]:
    m = mk_where([helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Where", [c, "a", "zero"], ["b"]),
            helper.make_node("ReduceSum", ["b"], ["y"], keepdims=0)], [("y", [])], [cond, condsmall, zero])
    print(nm, "measured", A.measure(m, R, C, "disable") / S, "predicted", A.predict_peak(m) / S)
