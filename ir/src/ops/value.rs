//! Constant tensor contents (initializers with embedded data, `Constant` nodes) and the
//! integers-as-[`Dim`] arithmetic that symbolic shape values use. Of external data, only a
//! small integer constant's own bytes are read (see [`crate::read_external_value`]).

use crate::dtype::DType;
use crate::graph::{Graph, ONNX_DOMAIN};
use crate::ids::TensorId;
use crate::onnx;
use crate::shape::Dim;

/// Largest integer tensor whose elements inference tracks (shape vectors, axes, pads).
pub(crate) const MAX_VALUE_ELEMS: u64 = 64;

/// A signed integer as a `Dim` (negative constants become a constant polynomial).
pub(crate) fn dim_of(v: i64) -> Dim {
    if v >= 0 {
        Dim::Known(v as u64)
    } else {
        Dim::Known(0).sub(&Dim::Known(v.unsigned_abs()))
    }
}

/// The integer a symbol-free `Dim` stands for.
pub(crate) fn int_of(d: &Dim) -> Option<i64> {
    match d {
        Dim::Known(k) => i64::try_from(*k).ok(),
        Dim::Sym(_) => None,
        Dim::Expr(_) => {
            if !d.symbols().is_empty() {
                return None;
            }
            let neg = Dim::Known(0).sub(d);
            neg.known().and_then(|k| i64::try_from(k).ok()).map(|k| -k)
        }
    }
}

/// Decoded contents of a constant.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ConstData {
    Ints(Vec<i64>),
    Floats(Vec<f64>),
}

fn le_chunks<const N: usize>(raw: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    raw.chunks_exact(N).map(|c| {
        let mut a = [0u8; N];
        a.copy_from_slice(c);
        a
    })
}

fn f16_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((bits >> 10) & 0x1f) as i32;
    let frac = (bits & 0x3ff) as f64;
    match exp {
        0 => sign * frac * 2f64.powi(-24),
        31 => {
            if frac == 0.0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            }
        }
        e => sign * (1.0 + frac / 1024.0) * 2f64.powi(e - 15),
    }
}

/// Decode an embedded TensorProto of a numeric or bool type; `None` for external data,
/// strings, and exotic types.
pub(crate) fn decode(t: &onnx::TensorProto) -> Option<ConstData> {
    if t.data_location == Some(onnx::tensor_proto::DataLocation::External as i32) {
        return None;
    }
    let dtype = DType::from_code(t.data_type.unwrap_or(0))?;
    let raw: Option<&[u8]> = t.raw_data.as_deref();
    let ints = |v: Vec<i64>| Some(ConstData::Ints(v));
    let floats = |v: Vec<f64>| Some(ConstData::Floats(v));
    match (dtype, raw) {
        (DType::I64, Some(r)) => ints(le_chunks::<8>(r).map(i64::from_le_bytes).collect()),
        (DType::I64, None) => ints(t.int64_data.clone()),
        (DType::U64, Some(r)) => ints(
            le_chunks::<8>(r)
                .map(|b| u64::from_le_bytes(b) as i64)
                .collect(),
        ),
        (DType::U64, None) => ints(t.uint64_data.iter().map(|&v| v as i64).collect()),
        (DType::I32, Some(r)) => ints(
            le_chunks::<4>(r)
                .map(|b| i32::from_le_bytes(b) as i64)
                .collect(),
        ),
        (DType::U32, Some(r)) => ints(
            le_chunks::<4>(r)
                .map(|b| u32::from_le_bytes(b) as i64)
                .collect(),
        ),
        (DType::U32, None) => ints(t.uint64_data.iter().map(|&v| v as i64).collect()),
        (DType::I16, Some(r)) => ints(
            le_chunks::<2>(r)
                .map(|b| i16::from_le_bytes(b) as i64)
                .collect(),
        ),
        (DType::U16, Some(r)) => ints(
            le_chunks::<2>(r)
                .map(|b| u16::from_le_bytes(b) as i64)
                .collect(),
        ),
        (DType::I8, Some(r)) => ints(r.iter().map(|&b| b as i8 as i64).collect()),
        (DType::U8 | DType::Bool, Some(r)) => ints(r.iter().map(|&b| b as i64).collect()),
        (DType::I32 | DType::I16 | DType::I8 | DType::U16 | DType::U8 | DType::Bool, None) => {
            ints(t.int32_data.iter().map(|&v| v as i64).collect())
        }
        (DType::F32, Some(r)) => floats(
            le_chunks::<4>(r)
                .map(|b| f32::from_le_bytes(b) as f64)
                .collect(),
        ),
        (DType::F32, None) => floats(t.float_data.iter().map(|&v| v as f64).collect()),
        (DType::F64, Some(r)) => floats(le_chunks::<8>(r).map(f64::from_le_bytes).collect()),
        (DType::F64, None) => floats(t.double_data.clone()),
        (DType::F16, Some(r)) => floats(
            le_chunks::<2>(r)
                .map(|b| f16_to_f64(u16::from_le_bytes(b)))
                .collect(),
        ),
        (DType::F16, None) => floats(t.int32_data.iter().map(|&v| f16_to_f64(v as u16)).collect()),
        (DType::BF16, Some(r)) => floats(
            le_chunks::<2>(r)
                .map(|b| f32::from_bits((u16::from_le_bytes(b) as u32) << 16) as f64)
                .collect(),
        ),
        (DType::BF16, None) => floats(
            t.int32_data
                .iter()
                .map(|&v| f32::from_bits((v as u32) << 16) as f64)
                .collect(),
        ),
        _ => None,
    }
}

/// Whether `t` holds one element that is an integer 0 or a float +0.0 (the sign bit clear):
/// what every element of a `ConstantOfShape` of value `t` is bit for bit the same as a
/// zero-filled buffer.
pub fn is_one_positive_zero(t: &onnx::TensorProto) -> bool {
    match decode(t) {
        Some(ConstData::Ints(v)) => v == [0],
        Some(ConstData::Floats(v)) => v.len() == 1 && v[0] == 0.0 && v[0].is_sign_positive(),
        None => false,
    }
}

/// The value of a one-element float tensor (`None` for an integer one or any other count).
pub fn one_float(t: &onnx::TensorProto) -> Option<f64> {
    match decode(t)? {
        ConstData::Floats(v) if v.len() == 1 => Some(v[0]),
        _ => None,
    }
}

/// The TensorProto an initializer named `name` was imported from.
pub(crate) fn initializer_proto<'a>(graph: &'a Graph, name: &str) -> Option<&'a onnx::TensorProto> {
    graph
        .model()
        .graph
        .as_ref()?
        .initializer
        .iter()
        .find(|i| i.name.as_deref() == Some(name))
}

/// The value of a `Constant` node's attribute, as a TensorProto-like decoded value.
pub(crate) fn constant_node_value(node: &crate::graph::Node) -> Option<ConstData> {
    if let Some(t) = node.attr_t("value") {
        return decode(t);
    }
    if let Some(a) = node.attr("value_int") {
        return a.i.map(|v| ConstData::Ints(vec![v]));
    }
    if let Some(a) = node.attr("value_ints") {
        return Some(ConstData::Ints(a.ints.clone()));
    }
    if let Some(a) = node.attr("value_float") {
        return a.f.map(|v| ConstData::Floats(vec![v as f64]));
    }
    if let Some(a) = node.attr("value_floats") {
        return Some(ConstData::Floats(
            a.floats.iter().map(|&v| v as f64).collect(),
        ));
    }
    None
}

/// Contents of a tensor that is a constant: an embedded initializer that the caller cannot
/// override, or the output of a `Constant` node.
pub(crate) fn constant(graph: &Graph, t: TensorId) -> Option<ConstData> {
    let tensor = graph.tensor(t);
    match &tensor.source {
        crate::graph::TensorSource::Initializer {
            overridable: false,
            data,
        } => {
            let proto = initializer_proto(graph, &tensor.name)?;
            match data {
                crate::graph::InitData::Embedded => decode(proto),
                crate::graph::InitData::External {
                    location,
                    offset,
                    length,
                } => {
                    let raw = crate::read_external_value(
                        graph.dir()?,
                        proto,
                        location,
                        *offset,
                        *length,
                    )?;
                    decode(&onnx::TensorProto {
                        raw_data: Some(raw.into()),
                        data_location: None,
                        external_data: Vec::new(),
                        ..proto.clone()
                    })
                }
            }
        }
        crate::graph::TensorSource::Node(n) => {
            let node = graph.node(*n);
            if node.domain == ONNX_DOMAIN && node.op_type == "Constant" {
                constant_node_value(node)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// A constant tensor's elements as integers (bools as 0/1), if it is a constant of an
/// integer or bool type.
pub fn constant_i64(graph: &Graph, t: TensorId) -> Option<Vec<i64>> {
    match constant(graph, t)? {
        ConstData::Ints(v) => Some(v),
        ConstData::Floats(_) => None,
    }
}

/// A constant tensor's elements as floats (integers converted).
pub fn constant_f64(graph: &Graph, t: TensorId) -> Option<Vec<f64>> {
    match constant(graph, t)? {
        ConstData::Ints(v) => Some(v.into_iter().map(|x| x as f64).collect()),
        ConstData::Floats(v) => Some(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_ints_round_trip_through_dims() {
        for v in [-9223372036854775807, -5, -1, 0, 1, 7, i64::MAX] {
            assert_eq!(int_of(&dim_of(v)), Some(v));
        }
        assert_eq!(int_of(&Dim::sym("s")), None);
        assert_eq!(
            int_of(&Dim::sym("s").sub(&Dim::sym("s")).sub(&Dim::Known(3))),
            Some(-3)
        );
    }

    #[test]
    fn halves_decode() {
        assert_eq!(f16_to_f64(0x3c00), 1.0);
        assert_eq!(f16_to_f64(0xc000), -2.0);
        assert_eq!(f16_to_f64(0x3800), 0.5);
    }
}
