"""Writes ir/src/ops/onnx_ops.rs: every operator schema ONNX defines, by domain, op type and
the opset version it is defined from, with what ONNX's checker verifies of a node against it
(deprecation, input and output counts, the required single inputs, the attributes, the element
types each input and output allows), from the installed onnx package's schemas. Run from the
repository root with the project venv's Python."""

from onnx import defs, TensorProto
import onnx

ANY = 0xFFFFFFFF


def type_mask(s, p):
    """The element types formal parameter `p` of schema `s` allows, as bits of their
    TensorProto codes; ANY where it allows a type that is not a tensor (a sequence, an
    optional, a map) or one whose code does not fit."""
    allowed = [p.type_str]
    for c in s.type_constraints:
        if c.type_param_str == p.type_str:
            allowed = list(c.allowed_type_strs)
    mask = 0
    for t in allowed:
        if not (t.startswith("tensor(") and t.endswith(")")):
            return ANY
        code = getattr(TensorProto, t[len("tensor("):-1].upper(), None)
        if code is None or code >= 32:
            return ANY
        mask |= 1 << code
    return mask


def masks(s, params):
    return "&[" + ", ".join(f"{type_mask(s, p):#x}" for p in params) + "]"


def type_var(s, p):
    """The index in `s`'s type constraints of the type variable formal `p` is typed by, or 255
    where it names a concrete type, is heterogeneous variadic (each slot its own type), or
    allows a type that is not a tensor: the slots with one index must hold one element type."""
    if not p.is_homogeneous or type_mask(s, p) == ANY:
        return 255
    for i, c in enumerate(s.type_constraints):
        if c.type_param_str == p.type_str:
            return i
    return 255


def type_vars(s, params):
    return "&[" + ", ".join(str(type_var(s, p)) for p in params) + "]"


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
            f"({s.min_output}, {s.max_output}), ({single:#x}, {single_out:#x}), &[{attrs}], "
            f"({masks(s, s.inputs)}, {masks(s, s.outputs)}), "
            f"({type_vars(s, s.inputs)}, {type_vars(s, s.outputs)})),",
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
    "/// sorted by name, the element types each formal input and output allows (bit `c`: the",
    "/// `TensorProto` code `c`; all bits: a type that is not a tensor is allowed too; a variadic",
    "/// last formal stands for every slot from it on), the type variable each formal input and",
    "/// output is typed by (slots of one variable hold one element type; 255: none)).",
    "pub(crate) type SchemaRow = (",
    "    &'static str,",
    "    &'static str,",
    "    i64,",
    "    bool,",
    "    (u32, u32),",
    "    (u32, u32),",
    "    (u64, u64),",
    "    &'static [(&'static str, i32, bool)],",
    "    (&'static [u32], &'static [u32]),",
    "    (&'static [u8], &'static [u8]),",
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
