//! Elementwise ops: unary maths and activations, numpy-broadcast binary and variadic ops,
//! comparisons and logic, Where, Cast, Clip, and the contrib Gelu family. Integer
//! elements of small tensors (shape arithmetic) are carried through Add/Sub/Mul/Div,
//! comparisons, Where and Cast.

use crate::dtype::DType;
use crate::shape::{Dim, Shape};

use super::cost;
use super::ctx::{out_v, InferCtx};
use super::scratch::{bytes_of, Scratch, ScratchCtx};
use super::types::TensorType;
use super::value::{dim_of, int_of, MAX_VALUE_ELEMS};
use super::{FlopRule, OpDef};

type Out = Result<Vec<Option<TensorType>>, String>;

/// Output 0 has input 0's dtype and shape.
pub(crate) fn same_as_input(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    Ok(vec![out_v(x.dtype, x.shape.clone(), None)])
}

/// Elements of the broadcast of the given inputs, combined by `f`, when every input's
/// elements are tracked and the output is small.
fn bcast_value(
    ctx: &InferCtx<'_>,
    out: &Shape,
    ins: &[usize],
    f: impl Fn(&[&Dim]) -> Option<Dim>,
) -> Option<Vec<Dim>> {
    let od: Vec<usize> = out
        .dims()
        .iter()
        .map(|d| d.known().map(|k| k as usize))
        .collect::<Option<_>>()?;
    let n = od.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
    if n as u64 > MAX_VALUE_ELEMS {
        return None;
    }
    let mut srcs = Vec::new();
    for &i in ins {
        let t = ctx.opt(i)?;
        let dims: Vec<usize> = t
            .shape
            .dims()
            .iter()
            .map(|d| d.known().map(|k| k as usize))
            .collect::<Option<_>>()?;
        srcs.push((dims, t.value.as_deref()?));
    }
    let mut res = Vec::with_capacity(n);
    let mut idx = vec![0usize; od.len()];
    for _ in 0..n {
        let mut args = Vec::with_capacity(srcs.len());
        for (dims, vals) in &srcs {
            let off = od.len() - dims.len();
            let mut lin = 0usize;
            for (a, &d) in dims.iter().enumerate() {
                let i = if d == 1 { 0 } else { idx[a + off] };
                lin = lin * d + i;
            }
            args.push(vals.get(lin)?);
        }
        res.push(f(&args)?);
        for a in (0..od.len()).rev() {
            idx[a] += 1;
            if idx[a] < od[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    Some(res)
}

fn all_inputs(ctx: &InferCtx<'_>) -> Vec<usize> {
    (0..ctx.n_inputs()).filter(|&i| ctx.has(i)).collect()
}

fn bcast_shape(ctx: &InferCtx<'_>, ins: &[usize]) -> Result<Shape, String> {
    let shapes: Vec<&Shape> = ins
        .iter()
        .map(|&i| ctx.shape(i))
        .collect::<Result<_, _>>()?;
    ctx.broadcast(&shapes)
}

fn floor_div(a: i64, b: i64) -> Option<i64> {
    let (q, r) = (a.checked_div(b)?, a.checked_rem(b)?);
    Some(if r != 0 && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    })
}

fn arith(op: &str, a: &Dim, b: &Dim) -> Option<Dim> {
    match op {
        "Add" => Some(a.add(b)),
        "Sub" => Some(a.sub(b)),
        "Mul" => Some(a.mul(b)),
        "Div" => match (int_of(a), int_of(b)) {
            (Some(x), Some(y)) => floor_div(x, y).map(dim_of),
            _ => a.div_exact(b),
        },
        "Max" | "Min" => {
            let (x, y) = (int_of(a)?, int_of(b)?);
            Some(dim_of(if op == "Max" { x.max(y) } else { x.min(y) }))
        }
        _ => None,
    }
}

fn compare(op: &str, a: &Dim, b: &Dim) -> Option<Dim> {
    let r = match (int_of(a), int_of(b)) {
        (Some(x), Some(y)) => match op {
            "Equal" => x == y,
            "Less" => x < y,
            "LessOrEqual" => x <= y,
            "Greater" => x > y,
            "GreaterOrEqual" => x >= y,
            _ => return None,
        },
        // Identical polynomials are equal whatever the bindings.
        _ if a == b => matches!(op, "Equal" | "LessOrEqual" | "GreaterOrEqual"),
        _ => return None,
    };
    Some(Dim::Known(r as u64))
}

fn logic(op: &str, a: &Dim, b: &Dim) -> Option<Dim> {
    let (x, y) = (int_of(a)? != 0, int_of(b)? != 0);
    let r = match op {
        "And" => x && y,
        "Or" => x || y,
        "Xor" => x != y,
        _ => return None,
    };
    Some(Dim::Known(r as u64))
}

/// Add, Sub, Mul, Div, Pow, Mod, PRelu, BitShift…: broadcast, dtype of input 0. Before
/// opset 7, B broadcasts to A (the `broadcast`/`axis` attributes): the output is A's shape.
fn binary(ctx: &InferCtx<'_>) -> Out {
    ctx.input(0)?;
    ctx.input(1)?; // both operands, whatever else is present
    let ins = all_inputs(ctx);
    let shape = if ctx.opset < 7 && ctx.node.domain == crate::graph::ONNX_DOMAIN {
        ctx.shape(0)?.clone()
    } else {
        bcast_shape(ctx, &ins)?
    };
    let op = ctx.node.op_type.as_str();
    let value = bcast_value(ctx, &shape, &ins, |a| arith(op, a[0], a[1]));
    Ok(vec![out_v(ctx.dtype(0)?, shape, value)])
}

/// Sum, Max, Min, Mean over any number of inputs.
fn variadic(ctx: &InferCtx<'_>) -> Out {
    let ins = all_inputs(ctx);
    let shape = bcast_shape(ctx, &ins)?;
    let op = ctx.node.op_type.clone();
    let value = bcast_value(ctx, &shape, &ins, |a| {
        let step = if op == "Sum" { "Add" } else { op.as_str() };
        a[1..]
            .iter()
            .try_fold(a[0].clone(), |acc, x| arith(step, &acc, x))
    });
    Ok(vec![out_v(ctx.dtype(0)?, shape, value)])
}

fn comparison(ctx: &InferCtx<'_>) -> Out {
    let shape = if ctx.opset < 7 {
        ctx.shape(0)?.clone()
    } else {
        bcast_shape(ctx, &[0, 1])?
    };
    let op = ctx.node.op_type.as_str();
    let value = bcast_value(ctx, &shape, &[0, 1], |a| compare(op, a[0], a[1]));
    Ok(vec![out_v(DType::Bool, shape, value)])
}

fn logical(ctx: &InferCtx<'_>) -> Out {
    let shape = if ctx.opset < 7 {
        ctx.shape(0)?.clone()
    } else {
        bcast_shape(ctx, &[0, 1])?
    };
    let op = ctx.node.op_type.as_str();
    let value = bcast_value(ctx, &shape, &[0, 1], |a| logic(op, a[0], a[1]));
    Ok(vec![out_v(DType::Bool, shape, value)])
}

fn not(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let value = x.value.as_ref().and_then(|v| {
        v.iter()
            .map(|d| int_of(d).map(|i| Dim::Known((i == 0) as u64)))
            .collect::<Option<Vec<_>>>()
    });
    Ok(vec![out_v(DType::Bool, x.shape.clone(), value)])
}

fn neg(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let value = x
        .value
        .as_ref()
        .map(|v| v.iter().map(|d| Dim::Known(0).sub(d)).collect());
    Ok(vec![out_v(x.dtype, x.shape.clone(), value)])
}

/// Unary ops whose output is the input's type, elements carried (Identity-like maths on
/// integers: Abs of a non-negative constant, Floor/Ceil/Round of integers).
fn unary_keep(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let value = match ctx.node.op_type.as_str() {
        "Abs" => x.value.as_ref().and_then(|v| {
            v.iter()
                .map(|d| int_of(d).and_then(i64::checked_abs).map(dim_of))
                .collect::<Option<Vec<_>>>()
        }),
        "Floor" | "Ceil" | "Round" => x.value.clone(),
        _ => None,
    };
    Ok(vec![out_v(x.dtype, x.shape.clone(), value)])
}

fn bool_of_input(ctx: &InferCtx<'_>) -> Out {
    Ok(vec![out_v(DType::Bool, ctx.shape(0)?.clone(), None)])
}

fn where_op(ctx: &InferCtx<'_>) -> Out {
    let shape = bcast_shape(ctx, &[0, 1, 2])?;
    let value = bcast_value(ctx, &shape, &[0, 1, 2], |a| {
        Some(if int_of(a[0])? != 0 {
            a[1].clone()
        } else {
            a[2].clone()
        })
    });
    Ok(vec![out_v(ctx.dtype(1)?, shape, value)])
}

/// Where's kernel copies X and Y broadcast to the condition's shape (`X_selection`,
/// `Y_selection`) before it allocates its output.
fn where_scratch(ctx: &ScratchCtx<'_>) -> Scratch {
    let (Some((_, cond)), Some((dt, x)), Some((_, y))) =
        (ctx.concrete(0), ctx.concrete(1), ctx.concrete(2))
    else {
        return Scratch::default();
    };
    let sel = |v: &[u64]| -> u64 {
        let rank = cond.len().max(v.len());
        let dim = |s: &[u64], i: usize| {
            if i + s.len() >= rank {
                s[i + s.len() - rank]
            } else {
                1
            }
        };
        let numel = (0..rank).fold(1u64, |n, i| n.saturating_mul(dim(&cond, i).max(dim(v, i))));
        bytes_of(dt, numel)
    };
    Scratch {
        before: vec![sel(&x), sel(&y)],
        after: Vec::new(),
    }
}

fn cast_value(v: Option<&Vec<Dim>>, to: DType) -> Option<Vec<Dim>> {
    let v = v?;
    match to {
        DType::Bool => v
            .iter()
            .map(|d| int_of(d).map(|i| Dim::Known((i != 0) as u64)))
            .collect(),
        d if d.is_float() => None,
        _ => Some(v.clone()),
    }
}

fn cast(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let code = ctx.attr_i("to").ok_or("Cast has no `to` attribute")?;
    let to =
        DType::from_code(code as i32).ok_or_else(|| format!("Cast to unknown type code {code}"))?;
    Ok(vec![out_v(
        to,
        x.shape.clone(),
        cast_value(x.value.as_ref(), to),
    )])
}

fn cast_like(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let to = ctx.dtype(1)?;
    Ok(vec![out_v(
        to,
        x.shape.clone(),
        cast_value(x.value.as_ref(), to),
    )])
}

/// com.microsoft BiasGelu / FastGelu with bias: broadcast of input and bias.
fn biased(ctx: &InferCtx<'_>) -> Out {
    let ins = all_inputs(ctx);
    let shape = bcast_shape(ctx, &ins)?;
    Ok(vec![out_v(ctx.dtype(0)?, shape, None)])
}

/// Per-element cost of ONNX Gelu: tanh approximation or erf.
fn gelu_flops(ctx: &super::FlopCtx<'_>) -> Result<u64, super::FlopError> {
    let k = if ctx.node.attr_s("approximate").as_deref() == Some("tanh") {
        cost::GELU_TANH
    } else {
        cost::GELU
    };
    let n = ctx.numel(ctx.out_shape(0)?)?;
    ctx.product(&[n, k])
}

pub(super) fn ops() -> Vec<OpDef> {
    let per = FlopRule::PerOutput(cost::ELEMENTWISE);
    let mut v = Vec::new();
    // Kernels ONNX Runtime's CPU EP registers `.MayInplace(0, 0)` (measured in
    // docs/design/ort-internals.md, rule 3.3).
    for op in [
        "Relu",
        "Tanh",
        "Sigmoid",
        "Softplus",
        "LeakyRelu",
        "Elu",
        "HardSigmoid",
        "Selu",
        "Celu",
        "ThresholdedRelu",
        "Shrink",
    ] {
        v.push(OpDef::onnx(op, 1, same_as_input, per).inplace(0, 0));
    }
    for op in [
        "Erf",
        "Exp",
        "Log",
        "Sqrt",
        "Reciprocal",
        "Sin",
        "Cos",
        "Tan",
        "Asin",
        "Acos",
        "Atan",
        "Sinh",
        "Cosh",
        "Asinh",
        "Acosh",
        "Atanh",
        "Sign",
        "Softsign",
        "HardSwish",
        "Mish",
        "BitwiseNot",
    ] {
        v.push(OpDef::onnx(op, 1, same_as_input, per));
    }
    for op in ["Abs", "Floor", "Ceil", "Round"] {
        v.push(OpDef::onnx(op, 1, unary_keep, per));
    }
    v.push(OpDef::onnx("Neg", 1, neg, per));
    v.push(OpDef::onnx("CumSum", 11, same_as_input, per));
    v.push(OpDef::onnx("Not", 1, not, per));
    v.push(OpDef::onnx("IsNaN", 9, bool_of_input, per));
    v.push(OpDef::onnx("IsInf", 10, bool_of_input, per));
    v.push(OpDef::onnx("Clip", 1, same_as_input, FlopRule::PerOutput(cost::CLIP)).inplace(0, 0));
    v.push(OpDef::onnx(
        "Gelu",
        20,
        same_as_input,
        FlopRule::Custom(gelu_flops),
    ));
    // Binary ops with numpy broadcasting (opset 7 on; before, B broadcast to A).
    for op in [
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Mod",
        "PRelu",
        "BitShift",
        "BitwiseAnd",
        "BitwiseOr",
        "BitwiseXor",
    ] {
        v.push(OpDef::onnx(op, 1, binary, per));
    }
    for op in ["Sum", "Max", "Min", "Mean"] {
        v.push(OpDef::onnx(op, 1, variadic, per).scratch(super::scratch::variadic_scratch));
    }
    for op in ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"] {
        v.push(OpDef::onnx(op, 1, comparison, per));
    }
    for op in ["And", "Or", "Xor"] {
        v.push(OpDef::onnx(op, 1, logical, per));
    }
    v.push(
        OpDef::onnx("Where", 9, where_op, per)
            .scratch(where_scratch)
            .pass_through(&[1, 2]),
    );
    v.push(
        OpDef::onnx("Cast", 6, cast, per)
            .inplace(0, 0)
            .pass_through(&[0]),
    );
    v.push(OpDef::onnx("CastLike", 15, cast_like, per));
    // Contrib activations (com.microsoft, version 1).
    v.push(OpDef::ms(
        "Gelu",
        same_as_input,
        FlopRule::PerOutput(cost::GELU),
    ));
    v.push(OpDef::ms(
        "FastGelu",
        biased,
        FlopRule::PerOutput(cost::GELU_TANH),
    ));
    v.push(OpDef::ms(
        "BiasGelu",
        biased,
        FlopRule::PerOutput(cost::BIAS_GELU),
    ));
    v.push(OpDef::ms(
        "QuickGelu",
        same_as_input,
        FlopRule::PerOutput(cost::GELU),
    ));
    v
}
