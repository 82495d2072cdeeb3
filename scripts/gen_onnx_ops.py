"""Writes ir/src/ops/onnx_ops.rs: every operator schema ONNX defines, by domain, op type and
the opset version it is defined from, with what ONNX's checker verifies of a node against it
(deprecation, input and output counts, the required single inputs, the attributes), from the
installed onnx package's schemas. Run from the repository root with the project venv's Python."""

from onnx import defs
import onnx

Single = defs.OpSchema.FormalParameterOption.Single
rows = []
for s in defs.get_all_schemas_with_history():
    single = 0
    for i, p in enumerate(s.inputs[:64]):
        if p.option == Single:
            single |= 1 << i
    single_out = 0
    for i, p in enumerate(s.outputs[:64]):
        if p.option == Single:
            single_out |= 1 << i
    attrs = ", ".join(
        f'("{name}", {int(a.type)}, {str(a.required).lower()})'
        for name, a in sorted(s.attributes.items())
    )
    rows.append(
        (
            s.domain or "ai.onnx",
            s.name,
            s.since_version,
            f'("{s.domain or "ai.onnx"}", "{s.name}", {s.since_version}, '
            f"{str(s.deprecated).lower()}, ({s.min_input}, {s.max_input}), "
            f"({s.min_output}, {s.max_output}), ({single:#x}, {single_out:#x}), &[{attrs}]),",
        )
    )
lines = [
    "//! Every operator schema ONNX defines: generated from onnx "
    + onnx.__version__
    + "'s schemas",
    "//! (`scripts/gen_onnx_ops.py`). An op of an ONNX domain outside this table is not an",
    "//! operator (ONNX Runtime refuses to load it); a node is checked against the schema of its",
    "//! op with the highest version at or below its domain's imported opset.",
    "",
    "/// One schema: (normalised domain, op type, opset version it is defined from, deprecated,",
    "/// (min, max) inputs, (min, max) outputs, the bits of the inputs and of the outputs that are",
    "/// single (required, not variadic), (attribute name, `AttributeProto` type code, required)",
    "/// sorted by name).",
    "pub(crate) type SchemaRow = (",
    "    &'static str,",
    "    &'static str,",
    "    i64,",
    "    bool,",
    "    (u32, u32),",
    "    (u32, u32),",
    "    (u64, u64),",
    "    &'static [(&'static str, i32, bool)],",
    ");",
    "",
    "/// Every schema, sorted by domain, op type, then version.",
    "#[rustfmt::skip]",
    "pub(crate) const ONNX_SCHEMAS: &[SchemaRow] = &[",
]
lines += [f"    {r[3]}" for r in sorted(rows)]
lines.append("];")
with open("ir/src/ops/onnx_ops.rs", "w") as f:
    f.write("\n".join(lines) + "\n")
