"""Dead values (read by nobody, not graph outputs) and buffer reuse: measured vs alloc_sim.py.

V1..V7 below; S = 4 MiB. Needs MEMPROBE (see memprobe/build.sh)."""
import sys
sys.path.insert(0, __import__("os").path.dirname(__file__))
from onnx import TensorProto, helper, shape_inference
import alloc_sim as A
R = C = 1024
S = 4 * R * C
def mk(nodes, outs):
    vi = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
    g = helper.make_graph(nodes, "g", [vi("x", [R, C])], [vi(o, s) for o, s in outs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]); m.ir_version = 8
    return shape_inference.infer_shapes(m)
N = lambda op, i, o: helper.make_node(op, i, [o], name=o)
cases = {
 # file order chosen so ORT runs them top to bottom (highest-index leaf first)
 "V1 dead t1, out t2, dead t3": mk([N("Exp", ["x"], "t3"), N("Sigmoid", ["x"], "t2"), N("Neg", ["x"], "t1")], [("t2", [R, C])]),
 "V3 dead t1, out t2, t3 read": mk([helper.make_node("ReduceSum", ["t3"], ["s"], keepdims=0, name="s"), N("Exp", ["x"], "t3"), N("Sigmoid", ["x"], "t2"), N("Neg", ["x"], "t1")], [("t2", [R, C]), ("s", [])]),
 "V4 dead t1, t3 read, no out": mk([helper.make_node("ReduceSum", ["t3"], ["s"], keepdims=0, name="s"), N("Exp", ["x"], "t3"), N("Neg", ["x"], "t1")], [("s", [])]),
 "V5 dead t1, dead t3": mk([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="s"), N("Exp", ["x"], "t3"), N("Neg", ["x"], "t1")], [("s", [])]),
}
for k, m in cases.items():
    print(k, "measured", A.measure(m, R, C, "disable") / S, "predicted", A.predict_peak(m) / S)
more = {
 "V6 a=Neg(x); dead Relu(a) (last use of a)": mk([N("Neg", ["x"], "a"), N("Relu", ["a"], "b"), helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="s")], [("s", [])]),
 "V7 a=Neg(x); dead Relu(a); c=Neg(x) read": mk([N("Neg", ["x"], "a"), N("Relu", ["a"], "b"), N("Neg", ["x"], "c"), helper.make_node("ReduceSum", ["c"], ["s"], keepdims=0, name="s")], [("s", [])]),
}
for k, m in more.items():
    print(k, "measured", A.measure(m, R, C, "disable") / S, "predicted", A.predict_peak(m) / S)
