"""Builds the tiny ONNX models (and one .npy) that runtime/tests/ run on ONNX Runtime.

Run from this directory with a python that has `onnx` and `numpy`:
    python make_models.py
Outputs are deterministic; commit them beside this script.
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 17)]
F = TensorProto.FLOAT


def save(name, nodes, inputs, outputs, initializers=(), opsets=OPSET):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="ckpt-runtime tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, f"{name}.onnx")


def vi(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


# small: y = Relu(x @ W + b), plus an int64 pass-through that exercises integer inputs and outputs.
w = np.arange(12, dtype=np.float32).reshape(3, 4) / 10 - 0.5
b = np.array([0.1, -0.2, 0.3, -0.4], dtype=np.float32)
save(
    "small",
    [
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul"),
        helper.make_node("Add", ["xw", "b"], ["xwb"], name="add"),
        helper.make_node("Relu", ["xwb"], ["y"], name="relu"),
        helper.make_node("Neg", ["ids"], ["neg_ids"], name="neg_ids"),
    ],
    [vi("x", ["batch", 3]), vi("ids", ["batch"], TensorProto.INT64)],
    [vi("y", ["batch", 4]), vi("neg_ids", ["batch"], TensorProto.INT64)],
    [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")],
)

# chain_free / chain_keep: a = Sin(x), b = Cos(a), c = Sin(b), y = ReduceSum(c). chain_keep also returns `a`,
# which keeps its 4 MiB alive to the end: its measured peak must exceed chain_free's by a's bytes.
N = 1 << 20
chain = [
    helper.make_node("Sin", ["x"], ["a"], name="sin_a"),
    helper.make_node("Cos", ["a"], ["b"], name="cos_b"),
    helper.make_node("Sin", ["b"], ["c"], name="sin_c"),
    helper.make_node("ReduceSum", ["c"], ["y"], name="sum_y", keepdims=0),
]
save("chain_free", chain, [vi("x", [N])], [vi("y", [])])
save("chain_keep", chain, [vi("x", [N])], [vi("y", []), vi("a", [N])])

# five: five nodes, each executed once.
save(
    "five",
    [
        helper.make_node("Sin", ["x"], ["s"], name="n0_sin"),
        helper.make_node("Cos", ["x"], ["c"], name="n1_cos"),
        helper.make_node("Mul", ["s", "c"], ["m"], name="n2_mul"),
        helper.make_node("Relu", ["m"], ["r"], name="n3_relu"),
        helper.make_node("Sigmoid", ["r"], ["y"], name="n4_sigmoid"),
    ],
    [vi("x", [4, 8])],
    [vi("y", [4, 8])],
)

# cse: two identical Exp nodes; ORT's CSE merges them unless disabled.
save(
    "cse",
    [
        helper.make_node("Exp", ["x"], ["e1"], name="exp_first"),
        helper.make_node("Exp", ["x"], ["e2"], name="exp_second"),
        helper.make_node("Add", ["e1", "e2"], ["y"], name="add"),
    ],
    [vi("x", [16])],
    [vi("y", [16])],
)

# gelugrad: an ORT training op that standard ORT builds do not have.
save(
    "gelugrad",
    [helper.make_node("GeluGrad", ["dy", "x"], ["dx"], name="gelu_grad", domain="com.microsoft")],
    [vi("dy", [8]), vi("x", [8])],
    [vi("dx", [8])],
    opsets=OPSET + [helper.make_opsetid("com.microsoft", 1)],
)

# x.npy: what numpy itself writes, for the .npy reader.
np.save("x.npy", np.array([[1.5, -2.0, 0.25], [3.0, 0.0, -0.125]], dtype=np.float32))
