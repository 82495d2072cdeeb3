"""Writes ir/src/ops/onnx_ops.rs: every operator ONNX defines, by domain, with the first opset
version that has it, from the installed onnx package's schemas. Run from the repository root
with the project venv's Python; then `cargo fmt --all`."""

from onnx import defs
import onnx

first = {}
for s in defs.get_all_schemas_with_history():
    key = (s.domain or "ai.onnx", s.name)
    first[key] = min(first.get(key, 10**9), s.since_version)
lines = [
    "//! Every operator ONNX defines, by domain, with the first opset version that has it:",
    f"//! generated from onnx {onnx.__version__}'s schemas (`scripts/gen_onnx_ops.py`). An op of an ONNX",
    "//! domain outside this table is not an operator (ONNX Runtime refuses to load it).",
    "",
    "/// (normalised domain, op type, first opset version), sorted by domain then op type.",
    "pub(crate) const ONNX_OPS: &[(&str, &str, i64)] = &[",
]
lines += [f'    ("{d}", "{n}", {v}),' for (d, n), v in sorted(first.items())]
lines.append("];")
with open("ir/src/ops/onnx_ops.rs", "w") as f:
    f.write("\n".join(lines) + "\n")
