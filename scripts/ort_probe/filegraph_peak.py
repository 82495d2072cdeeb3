"""Peak of the file graph (Constant nodes as initializers, no transformers) per alloc_sim.py: equals ORT's level-disable peak."""
import sys, glob, os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx
from onnx import shape_inference
import alloc_sim as A
for p in sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/fixtures/*_aot.onnx"))) + [os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../examples/gpt2_4l_train.onnx")]:
    m = onnx.load(p)
    # drop Constant nodes the way ORT does (their outputs become initializers)
    for n in [n for n in m.graph.node if n.op_type == "Constant"]:
        t = onnx.TensorProto(); t.CopyFrom(n.attribute[0].t); t.name = n.output[0]
        m.graph.initializer.append(t); m.graph.node.remove(n)
    m = shape_inference.infer_shapes(m)
    print(os.path.basename(p), A.predict_peak(m))

# Same, after a constant folding that mimics ORT's ConstantFolding transformer: a node whose inputs
# are all constants (initializers or folded values), or a Shape/Size of a fully static tensor, is
# evaluated at load; its outputs become initializers. Random* ops are never folded.
def _init(name, elem_type, dims):
    import numpy as np
    from onnx import numpy_helper, helper
    arr = np.zeros(dims, dtype=helper.tensor_dtype_to_np_dtype(elem_type))
    return numpy_helper.from_array(arr, name)


NONDET = {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Multinomial", "Bernoulli"}
print("-- with constant folding --")
for p in sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/fixtures/*_aot.onnx"))) + [os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../examples/gpt2_4l_train.onnx")]:
    m = shape_inference.infer_shapes(onnx.load(p))
    vi = {v.name: v for v in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output)}
    const = {i.name for i in m.graph.initializer} | {n.output[0] for n in m.graph.node if n.op_type == "Constant"}
    outputs = {o.name for o in m.graph.output}
    def static(t):
        v = vi.get(t)
        return v is not None and all(d.HasField("dim_value") for d in v.type.tensor_type.shape.dim)
    folded = set()
    changed = True
    while changed:
        changed = False
        for k, n in enumerate(m.graph.node):
            if k in folded or n.op_type in NONDET:
                continue
            ins = [t for t in n.input if t]
            if n.op_type == "Constant" or (ins and all(t in const for t in ins)) or \
                    (n.op_type in ("Shape", "Size") and static(n.input[0])):
                folded.add(k); const |= set(n.output); changed = True
    keep = [n for k, n in enumerate(m.graph.node) if k not in folded]
    for k in sorted(folded):
        n = m.graph.node[k]
        for o in n.output:
            v = vi[o] if o in vi else None
            if v is None:
                continue
            tt = v.type.tensor_type
            dims = [d.dim_value for d in tt.shape.dim]
            m.graph.initializer.append(_init(o, tt.elem_type, dims))
    del m.graph.node[:]
    m.graph.node.extend(keep)
    print(os.path.basename(p), A.predict_peak(m))
