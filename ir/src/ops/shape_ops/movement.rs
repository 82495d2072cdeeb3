//! Ops that select, join or repeat a tensor's elements: Concat, Split, Slice, Gather*,
//! Scatter* (and Trilu, shaped like their data), Expand, Tile, Pad and TopK. A 1-D small
//! integer tensor's elements are carried through where they are computable.

use crate::dtype::DType;
use crate::shape::{Dim, Shape};

use super::{fresh, shape_input, Out};
use crate::ops::ctx::{norm_axis, out, out_v, InferCtx};
use crate::ops::value::{dim_of, int_of, MAX_VALUE_ELEMS};

/// Ends at or beyond this are "to the end of the axis" (exporters write i64::MAX or
/// INT_MAX).
const END_OF_AXIS: i64 = i32::MAX as i64;
/// Concat over the present inputs; also used by com.microsoft ConcatTraining, whose
/// second output is each input's length along the axis.
pub(crate) fn concat(ctx: &InferCtx<'_>) -> Out {
    let ins: Vec<_> = (0..ctx.n_inputs())
        .filter(|&i| ctx.has(i))
        .map(|i| ctx.input(i))
        .collect::<Result<_, _>>()?;
    let first = ins.first().ok_or("Concat of nothing")?;
    let r = first.shape.rank();
    let axis = norm_axis(ctx.attr_i("axis").ok_or("Concat has no axis")?, r)?;
    let mut dims = first.shape.0.clone();
    let mut lengths = vec![first.shape.0[axis].clone()];
    for t in &ins[1..] {
        if t.shape.rank() != r {
            return Err(format!("ranks differ: {} vs {}", first.shape, t.shape));
        }
        dims[axis] = dims[axis].add(&t.shape.0[axis]);
        lengths.push(t.shape.0[axis].clone());
    }
    let value = if r == 1 {
        ins.iter()
            .map(|t| t.value.clone())
            .collect::<Option<Vec<_>>>()
            .map(|v| v.concat())
    } else {
        None
    };
    let mut v = vec![out_v(first.dtype, Shape(dims), value)];
    if ctx.node.op_type == "ConcatTraining" {
        v.push(out_v(
            DType::I64,
            Shape::known(&[lengths.len() as u64]),
            Some(lengths),
        ));
    }
    Ok(v)
}

pub(super) fn split(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let r = x.shape.rank();
    let axis = norm_axis(ctx.attr_i("axis").unwrap_or(0), r)?;
    let d = &x.shape.0[axis];
    let n = ctx.n_outputs();
    let sizes: Vec<Dim> = if ctx.has(1) {
        ctx.const_ints(1, "split")?
            .into_iter()
            .map(dim_of)
            .collect()
    } else if let Some(s) = ctx.attr_ints("split").filter(|s| !s.is_empty()) {
        s.into_iter().map(dim_of).collect()
    } else {
        let parts = ctx
            .attr_i("num_outputs")
            .map_or(n as u64, |k| k.max(0) as u64);
        if parts == 0 {
            return Err("Split into 0 parts".into());
        }
        if parts != n as u64 {
            return Err(format!("Split into {parts} parts for {n} outputs"));
        }
        match d.known() {
            Some(k) => {
                let chunk = k.div_ceil(parts);
                (0..parts)
                    .map(|i| Dim::Known(chunk.min(k.saturating_sub(chunk * i))))
                    .collect()
            }
            None => {
                let c = d
                    .div_exact(&Dim::Known(parts))
                    .unwrap_or_else(|| fresh(ctx, axis, &format!("{d} split {parts} ways")));
                vec![c; parts as usize]
            }
        }
    };
    if sizes.len() != n {
        return Err(format!("{} split sizes for {n} outputs", sizes.len()));
    }
    let mut v = Vec::with_capacity(n);
    let mut at = 0usize;
    for s in sizes {
        let mut dims = x.shape.0.clone();
        dims[axis] = s.clone();
        let value = match (&x.value, s.known()) {
            (Some(val), Some(k)) if r == 1 => val.get(at..at + k as usize).map(<[Dim]>::to_vec),
            _ => None,
        };
        at += s.known().unwrap_or(0) as usize;
        v.push(out_v(x.dtype, Shape(dims), value));
    }
    Ok(v)
}

/// One axis of a Slice: its length, and for concrete dims the selected indices.
fn slice_axis(
    ctx: &InferCtx<'_>,
    axis: usize,
    d: &Dim,
    start: &Dim,
    end: &Dim,
    step: i64,
) -> Result<(Dim, Option<Vec<usize>>), String> {
    if step == 0 {
        return Err("slice step 0".into());
    }
    if let (Some(dk), Some(s), Some(e)) = (d.known(), int_of(start), int_of(end)) {
        // In i128: the bounds and the step may be anywhere in i64, the dim anywhere in u64.
        let (dk, s, e, step) = (dk as i128, s as i128, e as i128, step as i128);
        let (s, e) = (
            if s < 0 { s + dk } else { s },
            if e < 0 { e + dk } else { e },
        );
        // First index, and how many: forward over [s, e), backward over (e, s].
        let (first, len) = if step > 0 {
            let (s, e) = (s.clamp(0, dk), e.clamp(0, dk));
            (s, if e > s { (e - s + step - 1) / step } else { 0 })
        } else if dk == 0 {
            (0, 0)
        } else {
            let (s, e) = (s.clamp(0, dk - 1), e.clamp(-1, dk - 1));
            (s, if s > e { (s - e - step - 1) / -step } else { 0 })
        };
        // Indices only for axes small enough to carry values (a dim may be 2^40).
        let idx = (dk <= MAX_VALUE_ELEMS as i128)
            .then(|| (0..len).map(|k| (first + k * step) as usize).collect());
        return Ok((Dim::Known(len as u64), idx));
    }
    if step != 1 {
        return Ok((
            fresh(ctx, axis, &format!("step {step} over symbolic bounds")),
            None,
        ));
    }
    let pos = |v: &Dim, is_end: bool| -> Dim {
        match int_of(v) {
            Some(i) if is_end && i >= END_OF_AXIS => d.clone(),
            Some(i) if i < 0 => d.sub(&Dim::Known(i.unsigned_abs())),
            Some(i) => {
                if i > 0 {
                    ctx.warn(format!(
                        "slice bound {i} assumed within axis {axis} of size {d}"
                    ));
                }
                Dim::Known(i as u64)
            }
            None => {
                ctx.warn(format!(
                    "slice bound {v} assumed within axis {axis} of size {d}"
                ));
                v.clone()
            }
        }
    };
    Ok((pos(end, true).sub(&pos(start, false)), None))
}

pub(super) fn slice(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let r = x.shape.rank();
    type Bounds = (Vec<Dim>, Vec<Dim>, Option<Vec<i64>>, Option<Vec<i64>>);
    let (starts, ends, axes, steps): Bounds = if ctx.opset < 10 {
        let a = |n: &str| ctx.attr_ints(n).unwrap_or_default();
        (
            a("starts").into_iter().map(dim_of).collect(),
            a("ends").into_iter().map(dim_of).collect(),
            ctx.attr_ints("axes"),
            None,
        )
    } else {
        let bound = |i: usize, what: &str| {
            ctx.value(i)
                .map(<[Dim]>::to_vec)
                .ok_or_else(|| format!("{what} (input {i}) is not computable"))
        };
        let axes = if ctx.has(3) {
            Some(ctx.const_ints(3, "axes")?)
        } else {
            None
        };
        let steps = if ctx.has(4) {
            Some(ctx.const_ints(4, "steps")?)
        } else {
            None
        };
        (bound(1, "starts")?, bound(2, "ends")?, axes, steps)
    };
    let axes = axes
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err("starts, ends, axes and steps differ in length".into());
    }
    let mut dims = x.shape.0.clone();
    let mut picks: Vec<Option<Vec<usize>>> = vec![None; r];
    for k in 0..starts.len() {
        let a = norm_axis(axes[k], r)?;
        let (len, idx) = slice_axis(ctx, a, &x.shape.0[a], &starts[k], &ends[k], steps[k])?;
        dims[a] = len;
        picks[a] = idx;
    }
    let value = match (&x.value, r) {
        (Some(v), 1) => match &picks[0] {
            Some(idx) => idx.iter().map(|&i| v.get(i).cloned()).collect(),
            None if dims[0] == x.shape.0[0] => Some(v.clone()),
            None => None,
        },
        _ => None,
    };
    Ok(vec![out_v(x.dtype, Shape(dims), value)])
}

pub(super) fn gather(ctx: &InferCtx<'_>) -> Out {
    let data = ctx.input(0)?;
    let idx = ctx.input(1)?;
    let r = data.shape.rank();
    let axis = norm_axis(ctx.attr_i("axis").unwrap_or(0), r)?;
    let mut dims = data.shape.0[..axis].to_vec();
    dims.extend(idx.shape.0.iter().cloned());
    dims.extend(data.shape.0[axis + 1..].iter().cloned());
    let value = match (&data.value, ctx.ints(1)) {
        (Some(v), Some(ix)) if r == 1 => ix
            .iter()
            .map(|&i| {
                let n = v.len() as i64;
                let j = if i < 0 { i + n } else { i };
                (0..n).contains(&j).then(|| v[j as usize].clone())
            })
            .collect(),
        _ => None,
    };
    Ok(vec![out_v(data.dtype, Shape(dims), value)])
}

pub(super) fn gather_elements(ctx: &InferCtx<'_>) -> Out {
    Ok(vec![out(ctx.dtype(0)?, ctx.shape(1)?.clone())])
}

pub(super) fn gather_nd(ctx: &InferCtx<'_>) -> Out {
    let data = ctx.shape(0)?;
    let idx = ctx.shape(1)?;
    let b = ctx.attr_i("batch_dims").unwrap_or(0) as usize;
    let q = idx.rank();
    let last = idx
        .0
        .last()
        .and_then(Dim::known)
        .ok_or("GatherND indices need a known last dim")? as usize;
    if q == 0 || b + last > data.rank() {
        return Err(format!("indices {idx} do not fit data {data}"));
    }
    let mut dims = idx.0[..q - 1].to_vec();
    dims.extend(data.0[b + last..].iter().cloned());
    Ok(vec![out(ctx.dtype(0)?, Shape(dims))])
}

pub(super) fn like_data(ctx: &InferCtx<'_>) -> Out {
    Ok(vec![out(ctx.dtype(0)?, ctx.shape(0)?.clone())])
}

pub(super) fn expand(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let target = Shape(shape_input(ctx, 1, "the expand shape")?);
    let shape = ctx.broadcast(&[&x.shape, &target])?;
    let value = match (&x.value, x.shape.numel().known(), shape.numel().known()) {
        (Some(v), Some(1), Some(n)) if n <= MAX_VALUE_ELEMS => Some(vec![v[0].clone(); n as usize]),
        (Some(v), _, _) if shape == x.shape => Some(v.clone()),
        _ => None,
    };
    Ok(vec![out_v(x.dtype, shape, value)])
}

pub(super) fn tile(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let reps = shape_input(ctx, 1, "repeats")?;
    if reps.len() != x.shape.rank() {
        return Err(format!(
            "{} repeats for rank {}",
            reps.len(),
            x.shape.rank()
        ));
    }
    let dims = x.shape.0.iter().zip(&reps).map(|(d, r)| d.mul(r)).collect();
    Ok(vec![out(x.dtype, Shape(dims))])
}

pub(super) fn pad(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let r = x.shape.rank();
    let pads: Vec<Dim> = if ctx.has(1) {
        shape_input(ctx, 1, "pads")?
    } else {
        ctx.attr_ints("pads")
            .unwrap_or_default()
            .into_iter()
            .map(dim_of)
            .collect()
    };
    let axes: Vec<usize> = if ctx.has(3) {
        ctx.const_ints(3, "axes")?
            .into_iter()
            .map(|a| norm_axis(a, r))
            .collect::<Result<_, _>>()?
    } else {
        (0..r).collect()
    };
    if pads.len() != 2 * axes.len() {
        return Err(format!("{} pads for {} axes", pads.len(), axes.len()));
    }
    let mut dims = x.shape.0.clone();
    let n = axes.len();
    for (k, &a) in axes.iter().enumerate() {
        dims[a] = dims[a].add(&pads[k]).add(&pads[k + n]);
    }
    Ok(vec![out(x.dtype, Shape(dims))])
}
pub(super) fn top_k(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let k = if ctx.has(1) {
        ctx.value(1)
            .and_then(|v| v.first().cloned())
            .ok_or("TopK k is not computable")?
    } else {
        Dim::Known(ctx.attr_i("k").ok_or("TopK has no k")? as u64)
    };
    let a = norm_axis(ctx.attr_i("axis").unwrap_or(-1), x.shape.rank())?;
    let mut dims = x.shape.0.clone();
    dims[a] = k;
    Ok(vec![
        out(x.dtype, Shape(dims.clone())),
        out(DType::I64, Shape(dims)),
    ])
}
