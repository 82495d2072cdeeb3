//! Ops that read or rearrange a tensor's dims: Shape, Size, Identity, Reshape, Flatten,
//! Squeeze, Unsqueeze (each an alias of its input in ORT's CPU EP but Shape and Size) and
//! Transpose. A small integer tensor's elements follow its dims where the order is kept.

use crate::dtype::DType;
use crate::shape::{Dim, Shape};

use super::{fresh, shape_input, Out};
use crate::ops::ctx::{norm_axis, out_v, InferCtx};
use crate::ops::value::{dim_of, int_of};

pub(super) fn shape_op(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.shape(0)?;
    let r = x.rank() as i64;
    let clamp = |v: i64| if v < 0 { (v + r).max(0) } else { v.min(r) };
    let start = clamp(ctx.attr_i("start").unwrap_or(0)) as usize;
    let end = ctx.attr_i("end").map_or(r, clamp) as usize;
    let dims = if start < end {
        x.0[start..end].to_vec()
    } else {
        vec![]
    };
    Ok(vec![out_v(
        DType::I64,
        Shape::known(&[dims.len() as u64]),
        Some(dims),
    )])
}

pub(super) fn size_op(ctx: &InferCtx<'_>) -> Out {
    Ok(vec![out_v(
        DType::I64,
        Shape(vec![]),
        Some(vec![ctx.shape(0)?.numel()]),
    )])
}

pub(super) fn identity(ctx: &InferCtx<'_>) -> Out {
    Ok(vec![Some(ctx.input(0)?.clone())])
}

pub(super) fn reshape(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let target = match ctx.attr_ints("shape").filter(|_| !ctx.has(1)) {
        Some(s) => s.into_iter().map(dim_of).collect(),
        None => shape_input(ctx, 1, "the target shape")?,
    };
    let allowzero = ctx.attr_i("allowzero").unwrap_or(0) != 0;
    let mut dims: Vec<Option<Dim>> = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (i, t) in target.iter().enumerate() {
        match int_of(t) {
            Some(0) if !allowzero => {
                dims.push(Some(x.shape.0.get(i).cloned().ok_or_else(|| {
                    format!("target dim {i} is 0 (copy) beyond the input rank")
                })?))
            }
            Some(-1) => {
                if infer_at.replace(i).is_some() {
                    return Err("more than one -1 in the target shape".into());
                }
                dims.push(None);
            }
            Some(v) if v < 0 => return Err(format!("target dim {i} is {v}")),
            _ => dims.push(Some(t.clone())),
        }
    }
    if let Some(i) = infer_at {
        let known = Dim::product(dims.iter().flatten());
        dims[i] = Some(match x.shape.numel().div_exact(&known) {
            Some(d) => d,
            None => fresh(
                ctx,
                i,
                &format!("cannot divide {} by {known} for -1", x.shape.numel()),
            ),
        });
    }
    let shape = Shape(dims.into_iter().flatten().collect());
    Ok(vec![out_v(x.dtype, shape, x.value.clone())])
}

pub(super) fn flatten(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let r = x.shape.rank() as i64;
    let a = ctx.attr_i("axis").unwrap_or(1);
    let a = if a < 0 { a + r } else { a };
    if !(0..=r).contains(&a) {
        return Err(format!("axis {a} is out of range for rank {r}"));
    }
    let (l, rt) = x.shape.0.split_at(a as usize);
    Ok(vec![out_v(
        x.dtype,
        Shape(vec![Dim::product(l), Dim::product(rt)]),
        x.value.clone(),
    )])
}

pub(super) fn axes_of(ctx: &InferCtx<'_>) -> Result<Option<Vec<i64>>, String> {
    if ctx.has(1) {
        return ctx.const_ints(1, "axes").map(Some);
    }
    Ok(ctx.attr_ints("axes").filter(|a| !a.is_empty()))
}

pub(super) fn squeeze(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let r = x.shape.rank();
    let dims = match axes_of(ctx)? {
        Some(axes) => {
            let mut drop = vec![false; r];
            for a in axes {
                drop[norm_axis(a, r)?] = true;
            }
            x.shape
                .0
                .iter()
                .zip(drop)
                .filter(|(_, d)| !d)
                .map(|(d, _)| d.clone())
                .collect()
        }
        None => {
            if x.shape.0.iter().any(|d| d.known().is_none()) {
                ctx.warn(format!(
                    "Squeeze without axes keeps symbolic dims of {} (assumed ≠ 1)",
                    x.shape
                ));
            }
            x.shape
                .0
                .iter()
                .filter(|d| **d != Dim::Known(1))
                .cloned()
                .collect()
        }
    };
    Ok(vec![out_v(x.dtype, Shape(dims), x.value.clone())])
}

pub(super) fn unsqueeze(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let axes = axes_of(ctx)?.ok_or("Unsqueeze needs axes")?;
    let r = x.shape.rank() + axes.len();
    let mut ones = vec![false; r];
    for a in axes {
        let i = norm_axis(a, r)?;
        if std::mem::replace(&mut ones[i], true) {
            return Err(format!("axis {a} repeats"));
        }
    }
    let mut src = x.shape.0.iter();
    let dims = ones
        .iter()
        .map(|&one| {
            if one {
                Some(Dim::Known(1))
            } else {
                src.next().cloned()
            }
        })
        .collect::<Option<Vec<_>>>();
    Ok(vec![out_v(
        x.dtype,
        Shape(dims.ok_or("axes do not fit the rank")?),
        x.value.clone(),
    )])
}

pub(super) fn transpose(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let r = x.shape.rank();
    let perm = ctx
        .attr_ints("perm")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| (0..r as i64).rev().collect());
    if perm.len() != r {
        return Err(format!("perm {perm:?} does not fit rank {r}"));
    }
    let dims = perm
        .iter()
        .map(|&p| norm_axis(p, r).map(|a| x.shape.0[a].clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let value = if r <= 1 { x.value.clone() } else { None };
    Ok(vec![out_v(x.dtype, Shape(dims), value)])
}
