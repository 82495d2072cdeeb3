//! Reductions: Reduce* (axes as attribute before opset 13/18, as input after), ArgMax /
//! ArgMin, com.microsoft ReduceSumTraining. FLOPs: one per input element.

use crate::dtype::DType;
use crate::shape::{Dim, Shape};

use super::cost;
use super::ctx::{norm_axis, out_v, InferCtx};
use super::types::TensorType;
use super::value::int_of;
use super::{FlopRule, OpDef};

type Out = Result<Vec<Option<TensorType>>, String>;

/// Reduce `shape` over `axes` (empty = all, unless `noop` keeps it as is).
pub(crate) fn reduce_shape(
    shape: &Shape,
    axes: &[i64],
    keepdims: bool,
    noop: bool,
) -> Result<Shape, String> {
    if axes.is_empty() && noop {
        return Ok(shape.clone());
    }
    let r = shape.rank();
    let mut hit = vec![axes.is_empty(); r];
    for &a in axes {
        hit[norm_axis(a, r)?] = true;
    }
    let mut d = Vec::with_capacity(r);
    for (i, dim) in shape.dims().iter().enumerate() {
        if !hit[i] {
            d.push(dim.clone());
        } else if keepdims {
            d.push(Dim::Known(1));
        }
    }
    Ok(Shape(d))
}

fn reduce(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let axes = if ctx.has(1) {
        ctx.const_ints(1, "axes")?
    } else {
        ctx.attr_ints("axes").unwrap_or_default()
    };
    let keep = ctx.attr_i("keepdims").unwrap_or(1) == 1;
    let noop = match ctx.attr_i("noop_with_empty_axes").unwrap_or(0) {
        0 => false,
        1 => true,
        v => {
            return Err(format!(
                "its noop_with_empty_axes is {v}: ONNX's inference reads any non-zero value as \
                 1 and ONNX Runtime only 1, so only 0 and 1 have one meaning"
            ))
        }
    };
    let shape = reduce_shape(&x.shape, &axes, keep, noop)?;
    // Sum or product of a whole 1-D shape vector (e.g. the element count).
    let full = x.shape.rank() == 1
        && (axes.is_empty() && !noop || axes.iter().all(|&a| a == 0 || a == -1));
    let value = match (ctx.node.op_type.as_str(), &x.value, full) {
        ("ReduceSum" | "ReduceSumTraining", Some(v), true) => {
            Some(vec![v.iter().fold(Dim::Known(0), |a, d| a.add(d))])
        }
        ("ReduceProd", Some(v), true) => Some(vec![Dim::product(v)]),
        ("ReduceMax" | "ReduceMin", Some(v), true) => {
            let ints: Option<Vec<i64>> = v.iter().map(int_of).collect();
            ints.and_then(|i| {
                let m = if ctx.node.op_type == "ReduceMax" {
                    i.iter().max()
                } else {
                    i.iter().min()
                };
                m.map(|&m| vec![super::value::dim_of(m)])
            })
        }
        _ => None,
    };
    Ok(vec![out_v(x.dtype, shape, value)])
}

fn arg_reduce(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let axis = ctx.attr_i("axis").unwrap_or(0);
    let keep = ctx.attr_i("keepdims").unwrap_or(1) == 1;
    Ok(vec![out_v(
        DType::I64,
        reduce_shape(&x.shape, &[axis], keep, false)?,
        None,
    )])
}

pub(super) fn ops() -> Vec<OpDef> {
    let per_in = FlopRule::PerInput(0, cost::REDUCTION);
    let mut v = Vec::new();
    for op in [
        "ReduceSum",
        "ReduceMean",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceSumSquare",
    ] {
        v.push(OpDef::onnx(op, 1, reduce, per_in));
    }
    v.push(OpDef::onnx("ArgMax", 1, arg_reduce, per_in));
    v.push(OpDef::onnx("ArgMin", 1, arg_reduce, per_in));
    v.push(OpDef::ms("ReduceSumTraining", reduce, per_in));
    v
}
