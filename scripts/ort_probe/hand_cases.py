"""Small hand-built graphs whose ORT order is pinned in passes/src/schedule.rs unit tests.

Each case: list of (op, inputs, outputs) in file order; graph inputs start with 'x',
graph outputs are listed explicitly. Prints ORT's profiled order (node indices) per case
at levels disable and basic.
"""
import numpy as np
from onnx import TensorProto, helper

from ort_order import make_session, ort_default_order, profiled_order

CASES = {
    # a chain written in file order
    "chain": ([("Relu", ["x"], ["a"]), ("Neg", ["a"], ["b"]), ("Abs", ["b"], ["c"])], ["c"]),
    # the same chain written backwards in the file
    "chain_reversed": ([("Abs", ["b"], ["c"]), ("Neg", ["a"], ["b"]), ("Relu", ["x"], ["a"])], ["c"]),
    # diamond: the input with the higher node index is expanded (and so executed) first
    "diamond": ([("Relu", ["x"], ["a"]), ("Neg", ["a"], ["b"]), ("Abs", ["a"], ["c"]),
                 ("Add", ["b", "c"], ["d"])], ["d"]),
    # same diamond, branch nodes swapped in the file: slot order does not matter, index does
    "diamond_swapped_slots": ([("Relu", ["x"], ["a"]), ("Neg", ["a"], ["b"]), ("Abs", ["a"], ["c"]),
                               ("Add", ["c", "b"], ["d"])], ["d"]),
    # independent leaves: the leaf with the highest index runs first
    "two_leaves": ([("Relu", ["x"], ["a"]), ("Neg", ["x"], ["b"])], ["a", "b"]),
    # graph output that is also consumed is not a leaf; an unconsumed, non-output tensor's producer is a leaf
    "consumed_output": ([("Relu", ["x"], ["a"]), ("Neg", ["a"], ["b"]), ("Sigmoid", ["x"], ["dead"]),
                         ("Abs", ["x"], ["c"])], ["a", "b", "c"]),
    # training-like: fwd a=Relu(x), h=Tanh(a), loss=Neg(h); bwd g1=Mul(loss,h), g2=Mul(g1,a) written
    # with backward nodes first in the file
    "fwd_bwd_interleaved": ([("Mul", ["g1", "a"], ["g2"]), ("Relu", ["x"], ["a"]), ("Mul", ["loss", "h"], ["g1"]),
                             ("Tanh", ["a"], ["h"]), ("Neg", ["h"], ["loss"])], ["g2", "loss"]),
    # one node consuming the same producer twice + a long skip connection
    "skip": ([("Relu", ["x"], ["a"]), ("Mul", ["a", "a"], ["b"]), ("Neg", ["b"], ["c"]), ("Abs", ["c"], ["d"]),
              ("Add", ["a", "d"], ["e"]), ("Sigmoid", ["b"], ["f"]), ("Add", ["e", "f"], ["g"])], ["g"]),
}


def build(nodes, outputs):
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 4])
    g = helper.make_graph([helper.make_node(op, i, o, name=f"n{k}") for k, (op, i, o) in enumerate(nodes)], "g",
                          [vi("x")], [vi(o) for o in outputs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def main():
    for name, (nodes, outputs) in CASES.items():
        m = build(nodes, outputs)
        res = {}
        for level in ("disable", "basic"):
            s = make_session(m.SerializeToString(), level=level)
            res[level] = [i for i, _, _ in profiled_order(s, {"x": np.ones((4, 4), np.float32)})]
        emu = ort_default_order([{"inputs": i, "outputs": o} for _, i, o in nodes])
        producer = {o: k for k, (_, _, os_) in enumerate(nodes) for o in os_}
        prods = [[producer.get(t) for t in i] for _, i, _ in nodes]
        print(f"{name}: producers={prods} ort(disable)={res['disable']} ort(basic)={res['basic']} emu={emu}")


if __name__ == "__main__":
    main()
