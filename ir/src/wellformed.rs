//! The rules ONNX's checker and ONNX Runtime's loader apply that import enforces beyond the
//! graph's structure: every op is one that ONNX (at the imported opset) or ONNX Runtime's
//! own domains define, or a function the model defines; every attribute is named, typed (from
//! IR version 2 on) and holds at most one value field, of its type; every tensor type of a
//! graph input, output or value_info has an element type; every embedded initializer holds
//! exactly the data its shape and element type need; a node of an ONNX domain meets its op's
//! schema at the imported opset ([`check_schema`]), and, once inference has typed it, the
//! element types the schema allows ([`check_type_constraints`]). Each refusal names the node,
//! attribute or tensor.

use crate::dtype::DType;
use crate::error::ImportError;
use crate::graph::{normalise_domain, Graph};
use crate::ids::TensorId;
use crate::onnx;
use crate::onnx::attribute_proto::AttributeType as A;
use crate::ops::onnx_ops::{SchemaRow, ONNX_SCHEMAS};
use crate::ops::Types;

/// Domains whose operators ONNX defines: an op of these domains must be in [`ONNX_SCHEMAS`].
const ONNX_DOMAINS: &[&str] = &[
    "ai.onnx",
    "ai.onnx.ml",
    "ai.onnx.preview.training",
    "ai.onnx.preview",
];

/// Domains ONNX Runtime implements itself (contrib, NCHWc, training, ATen). Their op sets
/// differ between ORT builds (the training build has more), so any op name is accepted.
const ORT_DOMAINS: &[&str] = &[
    "com.microsoft",
    "com.microsoft.nchwc",
    "com.microsoft.experimental",
    "ai.onnx.training",
    "org.pytorch.aten",
];

/// The schemas of `op_type` in ONNX `domain`, oldest first.
fn schemas(domain: &str, op_type: &str) -> &'static [SchemaRow] {
    let key = |r: &SchemaRow| (r.0, r.1);
    let start = ONNX_SCHEMAS.partition_point(|r| key(r) < (domain, op_type));
    let end = ONNX_SCHEMAS.partition_point(|r| key(r) <= (domain, op_type));
    &ONNX_SCHEMAS[start..end]
}

/// Check the op of node `label` against the registries.
pub(crate) fn check_op(
    model: &onnx::ModelProto,
    np: &onnx::NodeProto,
    label: &str,
) -> Result<(), ImportError> {
    let domain = normalise_domain(np.domain.as_deref().unwrap_or(""));
    let op = np.op_type.as_deref().unwrap_or("");
    let local_function = model.functions.iter().any(|f| {
        f.name.as_deref() == Some(op)
            && normalise_domain(f.domain.as_deref().unwrap_or("")) == domain
    });
    if local_function {
        return Ok(());
    }
    let unknown = |why: String| ImportError::UnknownOp {
        node: label.to_string(),
        op: op.to_string(),
        domain: domain.clone(),
        why,
    };
    let imported = model.opset_import.iter().find_map(|o| {
        (normalise_domain(o.domain.as_deref().unwrap_or("")) == domain)
            .then(|| o.version.unwrap_or(0))
    });
    if ONNX_DOMAINS.contains(&domain.as_str()) {
        let all = schemas(&domain, op);
        let since = all.first().map(|r| r.2).ok_or_else(|| {
            unknown("ONNX defines no such operator (names are case-sensitive)".into())
        })?;
        let opset =
            imported.ok_or_else(|| unknown("the model imports no opset of its domain".into()))?;
        if since > opset {
            return Err(unknown(format!(
                "it exists from opset {since}, and the model imports opset {opset}"
            )));
        }
        return Ok(());
    }
    if ORT_DOMAINS.contains(&domain.as_str()) {
        if imported.is_none() {
            return Err(unknown("the model imports no opset of its domain".into()));
        }
        return Ok(());
    }
    Err(unknown(
        "neither ONNX nor ONNX Runtime defines this domain, and the model defines no such function"
            .into(),
    ))
}

/// Check node `label` of an ONNX domain against its op's schema at the imported opset, as
/// ONNX's checker and ONNX Runtime's loader do: not deprecated there; its input and output
/// counts in the schema's ranges, no single input or output left empty; every attribute named
/// once, known to the schema (or internal: `__` first) and of its type, a singular one
/// holding its value; every required attribute there. Nodes of other domains, and ops or
/// opsets [`check_op`] refuses, pass.
pub(crate) fn check_schema(
    model: &onnx::ModelProto,
    np: &onnx::NodeProto,
    label: &str,
) -> Result<(), ImportError> {
    let domain = normalise_domain(np.domain.as_deref().unwrap_or(""));
    let opset = model.opset_import.iter().find_map(|o| {
        (normalise_domain(o.domain.as_deref().unwrap_or("")) == domain)
            .then(|| o.version.unwrap_or(0))
    });
    let all = schemas(&domain, np.op_type.as_deref().unwrap_or(""));
    let Some(schema) = opset.and_then(|v| all.iter().rev().find(|r| r.2 <= v)) else {
        return Ok(());
    };
    let &(_, op, version, deprecated, inputs, outputs, (single_in, single_out), attributes, ..) =
        schema;
    let bad = |what: String| ImportError::SchemaMismatch {
        node: label.to_string(),
        op: op.to_string(),
        version,
        what,
    };
    if deprecated {
        return Err(bad(format!("ONNX deprecates {op} from opset {version}")));
    }
    let lists = [
        ("inputs", &np.input, inputs, single_in),
        ("outputs", &np.output, outputs, single_out),
    ];
    for (what, names, (min, max), single) in lists {
        let n = names.len();
        if n < min as usize || n > max as usize {
            return Err(bad(format!("it has {n} {what}, outside {min}..={max}")));
        }
        let empty = names.iter().take(64).enumerate();
        if let Some((i, _)) = empty
            .filter(|(_, s)| s.is_empty())
            .find(|(i, _)| single & (1 << i) != 0)
        {
            return Err(bad(format!("its {what} #{i} is required, and empty")));
        }
    }
    let mut seen: Vec<&str> = Vec::with_capacity(np.attribute.len());
    for a in &np.attribute {
        let name = a.name.as_deref().unwrap_or("");
        if seen.contains(&name) {
            return Err(bad(format!("attribute `{name}` appears twice")));
        }
        seen.push(name);
        let Some(&(_, code, _)) = attributes.iter().find(|x| x.0 == name) else {
            if name.starts_with("__") {
                continue;
            }
            return Err(bad(format!(
                "it has attribute `{name}`, which the schema does not name"
            )));
        };
        let expected = A::try_from(code).map_or("?", |t| t.as_str_name());
        if a.r#type != Some(code) {
            let found = a
                .r#type
                .and_then(|t| A::try_from(t).ok())
                .map_or("none", |t| t.as_str_name());
            return Err(bad(format!(
                "attribute `{name}` has type {found}, where the schema says {expected}"
            )));
        }
        let holds = match A::try_from(code) {
            Ok(A::Float) => a.f.is_some(),
            Ok(A::Int) => a.i.is_some(),
            Ok(A::String) => a.s.is_some(),
            Ok(A::Tensor) => a.t.is_some(),
            Ok(A::Graph) => a.g.is_some(),
            Ok(A::SparseTensor) => a.sparse_tensor.is_some(),
            Ok(A::TypeProto) => a.tp.is_some(),
            _ => true,
        };
        let referenced = a.ref_attr_name.as_deref().is_some_and(|r| !r.is_empty());
        if !holds && !referenced {
            return Err(bad(format!(
                "attribute `{name}` of type {expected} holds no value"
            )));
        }
    }
    if let Some((name, _, _)) = attributes.iter().find(|x| x.2 && !seen.contains(&x.0)) {
        return Err(bad(format!("its required attribute `{name}` is missing")));
    }
    Ok(())
}

/// Check each node of an ONNX domain against the element types its op's schema (at the imported
/// opset) allows for each input and output, on the element types `types` gives, as ONNX's
/// checker does in its shape inference and ONNX Runtime does when it looks for a kernel (a
/// `Neg` of a bool has none): each slot's type is one its formal allows, and the slots of one
/// type variable hold one type (a `Mul` of an f32 and an i64 has no kernel either). The first
/// slot that breaks it is named: the node, the slot, the tensor, its type and the types
/// allowed, or the slot of the same variable it differs from. Slots whose formal allows a type
/// that is not a tensor are not checked.
pub fn check_type_constraints(graph: &Graph, types: &Types) -> Result<(), ImportError> {
    for &n in graph.nodes() {
        let node = graph.node(n);
        let Some(opset) = graph.opset(&node.domain) else {
            continue;
        };
        let all = schemas(&node.domain, &node.op_type);
        let Some(&(_, op, version, .., (ins, outs), (in_vars, out_vars))) =
            all.iter().rev().find(|r| r.2 <= opset)
        else {
            continue;
        };
        let bad = |what: String| ImportError::SchemaMismatch {
            node: node.display_name(n),
            op: op.to_string(),
            version,
            what,
        };
        // The first slot seen of each type variable: (its type, what it is, its tensor).
        let mut first: Vec<Option<(DType, &str, usize, TensorId)>> = Vec::new();
        for (what, slots, formals, vars) in [
            ("input", &node.inputs, ins, in_vars),
            ("output", &node.outputs, outs, out_vars),
        ] {
            for (k, slot) in slots.iter().enumerate() {
                let (Some(t), Some(&mask)) = (slot, formals.get(k).or(formals.last())) else {
                    continue;
                };
                let Some(tt) = types.get(*t).filter(|_| mask != u32::MAX) else {
                    continue;
                };
                let code = tt.dtype.code();
                if !(0..32).contains(&code) || mask & (1 << code) == 0 {
                    let allowed: Vec<String> = (0..32)
                        .filter(|c| mask & (1 << c) != 0)
                        .filter_map(DType::from_code)
                        .map(|d| d.to_string())
                        .collect();
                    return Err(bad(format!(
                        "its {what} #{k} `{}` is {}, which the schema does not allow ({})",
                        graph.tensor(*t).name,
                        tt.dtype,
                        allowed.join(", ")
                    )));
                }
                let var = usize::from(vars.get(k).or(vars.last()).copied().unwrap_or(255));
                if var == 255 {
                    continue;
                }
                if first.len() <= var {
                    first.resize(var + 1, None);
                }
                match first[var] {
                    None => first[var] = Some((tt.dtype, what, k, *t)),
                    Some((d, w, j, u)) if d != tt.dtype => {
                        return Err(bad(format!(
                            "its {what} #{k} `{}` is {} and its {w} #{j} `{}` is {d}, where the \
                             schema types both by one type variable",
                            graph.tensor(*t).name,
                            tt.dtype,
                            graph.tensor(u).name,
                        )));
                    }
                    Some(_) => {}
                }
            }
        }
    }
    Ok(())
}

/// Check that each attribute of node `label` is named, typed (from IR version 2 on) and holds
/// at most one value field, of its `type`.
pub(crate) fn check_attributes(
    np: &onnx::NodeProto,
    label: &str,
    ir_version: i64,
) -> Result<(), ImportError> {
    for a in &np.attribute {
        let present: [(bool, A); 14] = [
            (a.f.is_some(), A::Float),
            (a.i.is_some(), A::Int),
            (a.s.is_some(), A::String),
            (a.t.is_some(), A::Tensor),
            (a.g.is_some(), A::Graph),
            (a.sparse_tensor.is_some(), A::SparseTensor),
            (a.tp.is_some(), A::TypeProto),
            (!a.floats.is_empty(), A::Floats),
            (!a.ints.is_empty(), A::Ints),
            (!a.strings.is_empty(), A::Strings),
            (!a.tensors.is_empty(), A::Tensors),
            (!a.graphs.is_empty(), A::Graphs),
            (!a.sparse_tensors.is_empty(), A::SparseTensors),
            (!a.type_protos.is_empty(), A::TypeProtos),
        ];
        let held: Vec<A> = present.iter().filter(|p| p.0).map(|p| p.1).collect();
        let bad = |what: String| ImportError::AttributeMismatch {
            node: label.to_string(),
            attribute: a.name.clone().unwrap_or_default(),
            what,
        };
        if a.name.as_deref().unwrap_or("").is_empty() {
            return Err(bad("it has no name; every attribute is named".into()));
        }
        if ir_version >= 2 && a.r#type.is_none() {
            return Err(bad(
                "it has no type, which every attribute has from IR version 2 on".into(),
            ));
        }
        if held.len() > 1 {
            let names: Vec<&str> = held.iter().map(|t| t.as_str_name()).collect();
            return Err(bad(format!(
                "it holds {} value fields ({}); an attribute holds one",
                held.len(),
                names.join(", ")
            )));
        }
        if let (Some(&field), Some(code)) = (held.first(), a.r#type) {
            if code != field as i32 {
                let declared = A::try_from(code)
                    .map_or_else(|_| code.to_string(), |t| t.as_str_name().to_string());
                return Err(bad(format!(
                    "its type is {declared} but it holds a {} value",
                    field.as_str_name()
                )));
            }
        }
    }
    Ok(())
}

/// Check that every type among the graph's inputs, outputs and value_info is a dense tensor
/// type (the analysis and the ops' inference know tensors only; an entry typed as a map or a
/// sequence would be kept in the output, unchecked) with a defined element type: ONNX Runtime
/// refuses to load a model with one that has none or UNDEFINED (0), and an output keeps these
/// entries.
pub(crate) fn check_elem_types(g: &onnx::GraphProto) -> Result<(), ImportError> {
    let lists: [(&'static str, &[onnx::ValueInfoProto]); 3] = [
        ("graph inputs", &g.input),
        ("graph outputs", &g.output),
        ("value_info", &g.value_info),
    ];
    for (list, values) in lists {
        for vi in values {
            use onnx::type_proto::Value;
            let elem = match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
                Some(Value::TensorType(t)) => t.elem_type,
                None => continue,
                Some(other) => {
                    let kind = match other {
                        Value::SequenceType(_) => "a sequence",
                        Value::MapType(_) => "a map",
                        Value::OptionalType(_) => "an optional",
                        Value::SparseTensorType(_) => "a sparse tensor",
                        _ => "an opaque value",
                    };
                    return Err(ImportError::NotATensor {
                        tensor: vi.name.clone().unwrap_or_default(),
                        list,
                        kind,
                    });
                }
            };
            if elem.unwrap_or(0) == 0 {
                return Err(ImportError::UndefinedElemType {
                    tensor: vi.name.clone().unwrap_or_default(),
                    list,
                });
            }
        }
    }
    Ok(())
}

/// How many values of which typed field `dtype` stores `numel` elements in.
fn typed_count(t: &onnx::TensorProto, dtype: DType, numel: u64) -> (usize, u64, &'static str) {
    use DType::*;
    match dtype {
        F32 => (t.float_data.len(), numel, "float_data values"),
        C64 => (
            t.float_data.len(),
            numel.saturating_mul(2),
            "float_data values",
        ),
        F64 => (t.double_data.len(), numel, "double_data values"),
        C128 => (
            t.double_data.len(),
            numel.saturating_mul(2),
            "double_data values",
        ),
        I64 => (t.int64_data.len(), numel, "int64_data values"),
        U32 | U64 => (t.uint64_data.len(), numel, "uint64_data values"),
        String => (t.string_data.len(), numel, "string_data values"),
        U4 | I4 | F4E2M1 => (t.int32_data.len(), numel.div_ceil(2), "int32_data values"),
        _ => (t.int32_data.len(), numel, "int32_data values"),
    }
}

/// Check that embedded initializer `name` holds exactly the data its shape needs: its
/// `raw_data` bytes, or else the count of its element type's typed field.
pub(crate) fn check_initializer_data(
    name: &str,
    t: &onnx::TensorProto,
    dtype: Option<DType>,
) -> Result<(), ImportError> {
    let Some(dtype) = dtype else {
        return Ok(());
    };
    let numel = t.dims.iter().try_fold(1u64, |n, &d| {
        u64::try_from(d).ok().and_then(|d| n.checked_mul(d))
    });
    let Some(numel) = numel else {
        return Ok(()); // negative or overflowing dims are refused by their own checks
    };
    let shape = format!("{:?}", t.dims);
    let wrong = |found: u64, expected: u64, unit: &str| ImportError::InitializerDataSize {
        tensor: name.to_string(),
        shape: shape.clone(),
        dtype: dtype.name(),
        found,
        expected,
        unit: unit.to_string(),
    };
    if let Some(raw) = &t.raw_data {
        if dtype == DType::String {
            return Err(wrong(
                raw.len() as u64,
                0,
                "raw_data bytes (strings have none)",
            ));
        }
        let expected = numel.saturating_mul(dtype.bits()).div_ceil(8);
        if raw.len() as u64 != expected {
            return Err(wrong(raw.len() as u64, expected, "raw_data bytes"));
        }
        return Ok(());
    }
    let (found, expected, unit) = typed_count(t, dtype, numel);
    if found as u64 != expected {
        return Err(wrong(found as u64, expected, unit));
    }
    Ok(())
}
