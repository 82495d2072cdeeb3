//! Shape and data-movement ops (0 FLOPs): Shape, Size, Reshape, Flatten, Squeeze,
//! Unsqueeze, Transpose, Concat, Split, Slice, Gather*, Scatter*, Expand, Tile, Pad,
//! Trilu, ConstantOfShape, Constant, Range, Identity, EyeLike, OneHot, TopK, and the
//! data-dependent NonZero, Compress, Unique (typed from value_info).
//!
//! These carry small integer tensors' elements symbolically (`Shape` yields a tensor's
//! dims as elements), which is what makes `Reshape`/`Expand`/`Slice` targets computable.
//! Reshape, Squeeze, Unsqueeze, Flatten and Identity alias their input in ONNX Runtime's
//! CPU EP (`.Alias(0, 0)` in `onnxruntime/core/providers/cpu/tensor/{reshape,squeeze,
//! unsqueeze,identity_op}.cc` and `cpu/nn/flatten.cc`).

use crate::dtype::DType;
use crate::shape::{Dim, Shape};

use super::cost;
use super::ctx::{declared, norm_axis, out, out_v, InferCtx};
use super::types::TensorType;
use super::value::{constant_node_value, dim_of, int_of, ConstData, MAX_VALUE_ELEMS};
use super::{FlopRule, IndexUse, OpDef};

type Out = Result<Vec<Option<TensorType>>, String>;

/// Ends at or beyond this are "to the end of the axis" (exporters write i64::MAX or
/// INT_MAX).
const END_OF_AXIS: i64 = i32::MAX as i64;

/// A dim nobody can determine statically: a fresh symbol named after the node and axis,
/// with a warning.
fn fresh(ctx: &InferCtx<'_>, axis: usize, why: &str) -> Dim {
    ctx.warn(format!("axis {axis}: {why}; using a fresh symbol"));
    Dim::sym(format!("?{}.{axis}", ctx.id))
}

/// The elements of a shape input (`Reshape`, `Expand`, `ConstantOfShape`, `Tile`…), or
/// fresh symbols when it is not computable but its length is known.
fn shape_input(ctx: &InferCtx<'_>, i: usize, what: &str) -> Result<Vec<Dim>, String> {
    if let Some(v) = ctx.value(i) {
        return Ok(v.to_vec());
    }
    let s = ctx.shape(i)?;
    match s.dims() {
        // A rank beyond the value-tracking bound is no real shape (a mutated file had 2^40).
        [Dim::Known(n)] if *n > MAX_VALUE_ELEMS => Err(format!(
            "{what} (input {i}) has {n} elements: a rank above {MAX_VALUE_ELEMS} is refused"
        )),
        [Dim::Known(n)] => Ok((0..*n as usize)
            .map(|a| fresh(ctx, a, &format!("{what} is not computable")))
            .collect()),
        _ => Err(format!(
            "{what} (input {i}) is neither computable nor of known length"
        )),
    }
}

fn shape_op(ctx: &InferCtx<'_>) -> Out {
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

fn size_op(ctx: &InferCtx<'_>) -> Out {
    Ok(vec![out_v(
        DType::I64,
        Shape(vec![]),
        Some(vec![ctx.shape(0)?.numel()]),
    )])
}

fn identity(ctx: &InferCtx<'_>) -> Out {
    Ok(vec![Some(ctx.input(0)?.clone())])
}

fn reshape(ctx: &InferCtx<'_>) -> Out {
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

fn flatten(ctx: &InferCtx<'_>) -> Out {
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

fn axes_of(ctx: &InferCtx<'_>) -> Result<Option<Vec<i64>>, String> {
    if ctx.has(1) {
        return ctx.const_ints(1, "axes").map(Some);
    }
    Ok(ctx.attr_ints("axes").filter(|a| !a.is_empty()))
}

fn squeeze(ctx: &InferCtx<'_>) -> Out {
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

fn unsqueeze(ctx: &InferCtx<'_>) -> Out {
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

fn transpose(ctx: &InferCtx<'_>) -> Out {
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

fn split(ctx: &InferCtx<'_>) -> Out {
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

fn slice(ctx: &InferCtx<'_>) -> Out {
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

fn gather(ctx: &InferCtx<'_>) -> Out {
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

fn gather_elements(ctx: &InferCtx<'_>) -> Out {
    Ok(vec![out(ctx.dtype(0)?, ctx.shape(1)?.clone())])
}

fn gather_nd(ctx: &InferCtx<'_>) -> Out {
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

fn like_data(ctx: &InferCtx<'_>) -> Out {
    Ok(vec![out(ctx.dtype(0)?, ctx.shape(0)?.clone())])
}

fn expand(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let target = Shape(shape_input(ctx, 1, "the expand shape")?);
    let shape = ctx.broadcast(&[&x.shape, &target])?;
    let value = match (&x.value, x.shape.numel().known(), shape.numel().known()) {
        (Some(v), Some(1), Some(n)) if n <= super::value::MAX_VALUE_ELEMS => {
            Some(vec![v[0].clone(); n as usize])
        }
        (Some(v), _, _) if shape == x.shape => Some(v.clone()),
        _ => None,
    };
    Ok(vec![out_v(x.dtype, shape, value)])
}

fn tile(ctx: &InferCtx<'_>) -> Out {
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

fn pad(ctx: &InferCtx<'_>) -> Out {
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

fn constant_of_shape(ctx: &InferCtx<'_>) -> Out {
    let dims = shape_input(ctx, 0, "the shape")?;
    let (dtype, fill) = match ctx.node.attr_t("value") {
        Some(t) => {
            let d =
                DType::from_code(t.data_type.unwrap_or(1)).ok_or("value has an unknown type")?;
            let fill = match super::value::decode(t) {
                Some(ConstData::Ints(v)) => v.first().copied(),
                _ => None,
            };
            (d, fill)
        }
        None => (DType::F32, None),
    };
    let shape = Shape(dims);
    let value = match (fill, shape.numel().known()) {
        (Some(f), Some(n)) if n <= super::value::MAX_VALUE_ELEMS => {
            Some(vec![dim_of(f); n as usize])
        }
        _ => None,
    };
    Ok(vec![out_v(dtype, shape, value)])
}

fn constant(ctx: &InferCtx<'_>) -> Out {
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

fn range(ctx: &InferCtx<'_>) -> Out {
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
        (Some(s), Some(d), Some(n)) if n <= super::value::MAX_VALUE_ELEMS => (0..n as i64)
            .map(|i| i.checked_mul(d).and_then(|x| x.checked_add(s)).map(dim_of))
            .collect(),
        _ => None,
    };
    Ok(vec![out_v(dtype, Shape(vec![len]), value)])
}

fn eye_like(ctx: &InferCtx<'_>) -> Out {
    let dtype = match ctx.attr_i("dtype") {
        Some(c) => DType::from_code(c as i32).ok_or("unknown dtype")?,
        None => ctx.dtype(0)?,
    };
    Ok(vec![out(dtype, ctx.shape(0)?.clone())])
}

fn one_hot(ctx: &InferCtx<'_>) -> Out {
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

fn top_k(ctx: &InferCtx<'_>) -> Out {
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

pub(super) fn ops() -> Vec<OpDef> {
    let z = FlopRule::Zero;
    vec![
        OpDef::onnx("Shape", 1, shape_op, z),
        OpDef::onnx("Size", 1, size_op, z),
        OpDef::onnx("Identity", 1, identity, z)
            .alias(0, 0)
            .pass_through(&[0]),
        OpDef::onnx("Reshape", 1, reshape, z)
            .alias(0, 0)
            .pass_through(&[0]),
        OpDef::onnx("Flatten", 1, flatten, z)
            .alias(0, 0)
            .pass_through(&[0]),
        OpDef::onnx("Squeeze", 1, squeeze, z)
            .alias(0, 0)
            .pass_through(&[0]),
        OpDef::onnx("Unsqueeze", 1, unsqueeze, z)
            .alias(0, 0)
            .pass_through(&[0]),
        OpDef::onnx(
            "Transpose",
            1,
            transpose,
            FlopRule::PerOutput(cost::DATA_MOVEMENT),
        )
        .pass_through(&[0]),
        OpDef::onnx(
            "Concat",
            4,
            concat,
            FlopRule::PerOutput(cost::DATA_MOVEMENT),
        )
        .pass_through(&[0]),
        OpDef::onnx(
            "Split",
            2,
            split,
            FlopRule::PerInput(0, cost::DATA_MOVEMENT),
        ),
        OpDef::onnx("Slice", 1, slice, FlopRule::PerOutput(cost::DATA_MOVEMENT)).pass_through(&[0]),
        OpDef::onnx(
            "Gather",
            1,
            gather,
            FlopRule::PerOutput(cost::DATA_MOVEMENT),
        )
        .index_use(IndexUse::Indices),
        OpDef::onnx(
            "GatherElements",
            11,
            gather_elements,
            FlopRule::PerOutput(cost::DATA_MOVEMENT),
        )
        .index_use(IndexUse::Indices),
        OpDef::onnx(
            "GatherND",
            11,
            gather_nd,
            FlopRule::PerOutput(cost::DATA_MOVEMENT),
        ),
        OpDef::onnx(
            "ScatterElements",
            11,
            like_data,
            FlopRule::PerOutput(cost::DATA_MOVEMENT),
        )
        .inplace(0, 0)
        .index_use(IndexUse::Indices),
        OpDef::onnx(
            "ScatterND",
            11,
            like_data,
            FlopRule::PerOutput(cost::DATA_MOVEMENT),
        )
        .reduction_races(),
        OpDef::onnx(
            "Scatter",
            9,
            like_data,
            FlopRule::PerOutput(cost::DATA_MOVEMENT),
        )
        .until(10),
        OpDef::onnx(
            "Expand",
            8,
            expand,
            FlopRule::PerOutput(cost::DATA_MOVEMENT),
        )
        .pass_through(&[0]),
        OpDef::onnx("Tile", 6, tile, FlopRule::PerOutput(cost::DATA_MOVEMENT)),
        OpDef::onnx("Pad", 2, pad, FlopRule::PerOutput(cost::DATA_MOVEMENT)).pass_through(&[0]),
        OpDef::onnx(
            "Trilu",
            14,
            like_data,
            FlopRule::PerOutput(cost::ELEMENTWISE),
        )
        .inplace(0, 0),
        OpDef::onnx(
            "ConstantOfShape",
            9,
            constant_of_shape,
            FlopRule::PerOutput(cost::DATA_MOVEMENT),
        ),
        OpDef::onnx("Constant", 1, constant, z).folded_at_load(),
        OpDef::onnx("Range", 11, range, FlopRule::PerOutput(cost::ELEMENTWISE)),
        OpDef::onnx(
            "EyeLike",
            9,
            eye_like,
            FlopRule::PerOutput(cost::DATA_MOVEMENT),
        ),
        OpDef::onnx(
            "OneHot",
            9,
            one_hot,
            FlopRule::PerOutput(cost::DATA_MOVEMENT),
        ),
        OpDef::onnx("TopK", 1, top_k, FlopRule::PerInput(0, cost::REDUCTION)),
        // Data-dependent output shapes: deterministic, typed from value_info.
        OpDef::onnx(
            "NonZero",
            9,
            declared,
            FlopRule::PerInput(0, cost::ELEMENTWISE),
        ),
        OpDef::onnx(
            "Compress",
            9,
            declared,
            FlopRule::PerInput(0, cost::ELEMENTWISE),
        ),
        OpDef::onnx(
            "Unique",
            11,
            declared,
            FlopRule::PerInput(0, cost::REDUCTION),
        ),
    ]
}
