//! The rules ONNX's checker and ONNX Runtime's loader apply that import enforces beyond the
//! graph's structure: every op is one that ONNX (at the imported opset) or ONNX Runtime's
//! own domains define, or a function the model defines; every attribute's `type` agrees with
//! the one value field it holds; every embedded initializer holds exactly the data its shape
//! and element type need. Each refusal names the node, attribute or tensor.

use crate::dtype::DType;
use crate::error::ImportError;
use crate::graph::normalise_domain;
use crate::onnx;
use crate::onnx::attribute_proto::AttributeType as A;
use crate::ops::onnx_ops::ONNX_OPS;

/// Domains whose operators ONNX defines: an op of these domains must be in [`ONNX_OPS`].
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

/// The first opset of ONNX `domain` that defines `op_type`.
fn onnx_op_since(domain: &str, op_type: &str) -> Option<i64> {
    ONNX_OPS
        .binary_search_by(|&(d, o, _)| (d, o).cmp(&(domain, op_type)))
        .ok()
        .map(|i| ONNX_OPS[i].2)
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
        let since = onnx_op_since(&domain, op).ok_or_else(|| {
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

/// Check that each attribute of node `label` holds at most one value field, of its `type`.
pub(crate) fn check_attributes(np: &onnx::NodeProto, label: &str) -> Result<(), ImportError> {
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
