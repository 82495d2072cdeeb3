"""Turn a bench model's parameter inputs into initializers stored as external data.

    python external_data.py IN.onnx OUT_DIR/model.onnx

Every float graph input that has a `<name>_grad` graph output (the parameters of a joint training graph)
becomes an initializer with seeded N(0, 0.02) values (LayerNorm weights 1); all initializers, the small
constants included (`size_threshold=0`), go to `model.onnx.data` beside the model.
"""
import sys

import numpy as np
import onnx
from onnx import numpy_helper

src, dst = sys.argv[1], sys.argv[2]
m = onnx.load(src)
g = m.graph
grads = {o.name for o in g.output}
rng = np.random.default_rng(0)
keep = []
for i in g.input:
    tt = i.type.tensor_type
    if tt.elem_type == onnx.TensorProto.FLOAT and f"{i.name}_grad" in grads:
        shape = [d.dim_value for d in tt.shape.dim]
        if "ln" in i.name and i.name.endswith("weight"):
            a = np.ones(shape, np.float32)
        else:
            a = (rng.standard_normal(shape) * 0.02).astype(np.float32)
        g.initializer.append(numpy_helper.from_array(a, i.name))
    else:
        keep.append(i)
del g.input[:]
g.input.extend(keep)
location = dst.rsplit("/", 1)[-1] + ".data"
onnx.save(m, dst, save_as_external_data=True, all_tensors_to_one_file=True, location=location, size_threshold=0)
print(f"{dst}: {len(g.initializer)} initializers in {location}, inputs {[i.name for i in g.input]}")
