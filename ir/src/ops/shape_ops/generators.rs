//! Ops that make a tensor from a shape or attributes rather than rearrange one:
//! ConstantOfShape, Constant, Range, EyeLike, OneHot. Their small integer values are
//! computed where the inputs allow.

use crate::dtype::DType;
use crate::shape::{Dim, Shape};

use super::{fresh, shape_input, Out};
use crate::ops::ctx::{norm_axis, out, out_v, InferCtx};
use crate::ops::value::{constant_node_value, dim_of, int_of, ConstData};

pub(super) fn constant_of_shape(ctx: &InferCtx<'_>) -> Out {
    let dims = shape_input(ctx, 0, "the shape")?;
    let (dtype, fill) = match ctx.node.attr_t("value") {
        Some(t) => {
            let d =
                DType::from_code(t.data_type.unwrap_or(1)).ok_or("value has an unknown type")?;
            let fill = match crate::ops::value::decode(t) {
                Some(ConstData::Ints(v)) => v.first().copied(),
                _ => None,
            };
            (d, fill)
        }
        None => (DType::F32, None),
    };
    let shape = Shape(dims);
    let value = match (fill, shape.numel().known()) {
        (Some(f), Some(n)) if n <= crate::ops::value::MAX_VALUE_ELEMS => {
            Some(vec![dim_of(f); n as usize])
        }
        _ => None,
    };
    Ok(vec![out_v(dtype, shape, value)])
}

pub(super) fn constant(ctx: &InferCtx<'_>) -> Out {
    let n = ctx.node;
    let (dtype, shape) = if let Some(t) = n.attr_t("value") {
        let d = DType::from_code(t.data_type.unwrap_or(0)).ok_or("value has an unknown type")?;
        (
            d,
            Shape(
                t.dims
                    .iter()
                    .map(|&x| Dim::Known(x.max(0) as u64))
                    .collect(),
            ),
        )
    } else if n.attr("value_int").is_some() {
        (DType::I64, Shape(vec![]))
    } else if let Some(a) = n.attr("value_ints") {
        (DType::I64, Shape::known(&[a.ints.len() as u64]))
    } else if n.attr("value_float").is_some() {
        (DType::F32, Shape(vec![]))
    } else if let Some(a) = n.attr("value_floats") {
        (DType::F32, Shape::known(&[a.floats.len() as u64]))
    } else {
        return Err(
            "Constant without a supported value attribute (value, value_int(s), value_float(s))"
                .into(),
        );
    };
    let value = match constant_node_value(n) {
        Some(ConstData::Ints(v)) => Some(v.into_iter().map(dim_of).collect()),
        _ => None,
    };
    Ok(vec![out_v(dtype, shape, value)])
}

pub(super) fn range(ctx: &InferCtx<'_>) -> Out {
    let dtype = ctx.dtype(0)?;
    let one = |i: usize| ctx.value(i).and_then(|v| v.first().cloned());
    let (start, limit, delta) = (one(0), one(1), one(2));
    let len = match (
        start.as_ref().and_then(int_of),
        limit.as_ref().and_then(int_of),
        delta.as_ref().and_then(int_of),
    ) {
        (Some(s), Some(l), Some(d)) if d != 0 => {
            Dim::Known(((l as f64 - s as f64) / d as f64).ceil().max(0.0) as u64)
        }
        (_, _, Some(1)) if start.is_some() && limit.is_some() => limit
            .clone()
            .unwrap_or(Dim::Known(0))
            .sub(&start.clone().unwrap_or(Dim::Known(0))),
        _ => fresh(ctx, 0, "Range bounds are not computable"),
    };
    let value = match (
        start.as_ref().and_then(int_of),
        delta.as_ref().and_then(int_of),
        len.known(),
    ) {
        (Some(s), Some(d), Some(n)) if n <= crate::ops::value::MAX_VALUE_ELEMS => (0..n as i64)
            .map(|i| i.checked_mul(d).and_then(|x| x.checked_add(s)).map(dim_of))
            .collect(),
        _ => None,
    };
    Ok(vec![out_v(dtype, Shape(vec![len]), value)])
}

pub(super) fn eye_like(ctx: &InferCtx<'_>) -> Out {
    let dtype = match ctx.attr_i("dtype") {
        Some(c) => DType::from_code(c as i32).ok_or("unknown dtype")?,
        None => ctx.dtype(0)?,
    };
    Ok(vec![out(dtype, ctx.shape(0)?.clone())])
}

pub(super) fn one_hot(ctx: &InferCtx<'_>) -> Out {
    let idx = ctx.shape(0)?;
    let depth = ctx
        .value(1)
        .and_then(|v| v.first().cloned())
        .ok_or("OneHot depth is not a constant")?;
    let r = idx.rank() + 1;
    let a = norm_axis(ctx.attr_i("axis").unwrap_or(-1), r)?;
    let mut dims = idx.0.clone();
    dims.insert(a, depth);
    Ok(vec![out(ctx.dtype(2)?, Shape(dims))])
}
