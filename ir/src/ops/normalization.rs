//! Normalizations: Softmax, LogSoftmax, LayerNormalization (ONNX 17 and ORT's earlier
//! ai.onnx-domain contrib version), SimplifiedLayerNormalization, BatchNormalization,
//! Instance/Group/MeanVariance/Lp normalization, com.microsoft SkipLayerNormalization,
//! SkipSimplifiedLayerNormalization and BiasSoftmax.

use crate::dtype::DType;
use crate::graph::ONNX_DOMAIN;
use crate::shape::{Dim, Shape};

use super::cost;
use super::ctx::{norm_axis, out, InferCtx};
use super::elementwise::same_as_input;
use super::scratch::{bytes_of, Scratch, ScratchCtx};
use super::types::TensorType;
use super::{FlopRule, OpDef};

type Out = Result<Vec<Option<TensorType>>, String>;

/// The shape of LayerNorm's saved statistics: `X[:axis]` then ones.
pub(crate) fn stats_shape(x: &Shape, axis: i64) -> Result<Shape, String> {
    let a = norm_axis(axis, x.rank())?;
    let mut d = x.0[..a].to_vec();
    d.extend(std::iter::repeat_n(Dim::Known(1), x.rank() - a));
    Ok(Shape(d))
}

fn stash_dtype(ctx: &InferCtx<'_>) -> Result<DType, String> {
    let code = ctx.attr_i("stash_type").unwrap_or(1);
    DType::from_code(code as i32).ok_or_else(|| format!("stash_type {code} is not a type code"))
}

/// LayerNormalization: Y like X; Mean and InvStdDev `X[:axis] + [1…]` in stash_type.
fn layer_norm(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let stats = stats_shape(&x.shape, ctx.attr_i("axis").unwrap_or(-1))?;
    let sd = stash_dtype(ctx)?;
    Ok(vec![
        out(x.dtype, x.shape.clone()),
        out(sd, stats.clone()),
        out(sd, stats),
    ])
}

/// SimplifiedLayerNormalization (RMSNorm): Y like X, InvStdDev.
fn simplified_layer_norm(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let stats = stats_shape(&x.shape, ctx.attr_i("axis").unwrap_or(-1))?;
    Ok(vec![
        out(x.dtype, x.shape.clone()),
        out(stash_dtype(ctx)?, stats),
    ])
}

/// BatchNormalization: Y like X; in training mode running mean and var like the scale.
fn batch_norm(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let c = ctx.shape(1)?.clone();
    let mut v = vec![out(x.dtype, x.shape.clone())];
    for _ in 1..ctx.n_outputs().min(3) {
        v.push(out(ctx.dtype(3)?, c.clone()));
    }
    Ok(v)
}

/// com.microsoft SkipLayerNormalization / SkipSimplifiedLayerNormalization: output like the
/// input, then mean and inv-std (stats shape over the last axis, f32; the simplified
/// variant leaves mean empty), then the input+skip(+bias) sum like the input.
fn skip_layer_norm(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let stats = stats_shape(&x.shape, -1)?;
    let mut v = vec![out(x.dtype, x.shape.clone())];
    for k in 1..ctx.n_outputs() {
        v.push(if k < 3 {
            out(DType::F32, stats.clone())
        } else {
            out(x.dtype, x.shape.clone())
        });
    }
    Ok(v)
}

/// InstanceNormalization, GroupNormalization, LpNormalization, MeanVarianceNormalization:
/// output like the input.
fn like_input(ctx: &InferCtx<'_>) -> Out {
    same_as_input(ctx)
}

/// Softmax / LogSoftmax over a non-last axis (opset 13 on) transpose the axis to the end
/// through two input-sized temporaries, allocated after the output. Before opset 13 the
/// input is coerced to 2-D at `axis`: no transpose.
fn softmax_scratch(ctx: &ScratchCtx<'_>) -> Scratch {
    let Some((dt, x)) = ctx.concrete(0) else {
        return Scratch::default();
    };
    let rank = x.len() as i64;
    let opset13 = ctx.graph.opset(ONNX_DOMAIN).unwrap_or(13) >= 13;
    let node = ctx.graph.node(ctx.id);
    let axis = node.attr_i("axis").unwrap_or(if opset13 { -1 } else { 1 });
    let axis = if axis < 0 { axis + rank } else { axis };
    if !opset13 || axis == rank - 1 || rank == 0 {
        return Scratch::default();
    }
    let bytes = bytes_of(dt, x.iter().fold(1u64, |n, &d| n.saturating_mul(d)));
    Scratch {
        before: Vec::new(),
        after: vec![bytes, bytes],
    }
}

/// Softmax and LogSoftmax: the input's type, once `axis` is in `[-rank, rank)` (ONNX's
/// inference and ONNX Runtime refuse another; opset 13 defaults it to -1, earlier ones to 1).
fn softmax(ctx: &InferCtx<'_>) -> Result<Vec<Option<TensorType>>, String> {
    let x = ctx.input(0)?;
    let rank = x.shape.rank();
    if rank > 0 {
        let default = if ctx.opset >= 13 { -1 } else { 1 };
        norm_axis(ctx.attr_i("axis").unwrap_or(default), rank)?;
    }
    same_as_input(ctx)
}

pub(super) fn ops() -> Vec<OpDef> {
    vec![
        OpDef::onnx("Softmax", 1, softmax, FlopRule::PerOutput(cost::SOFTMAX))
            .inplace(0, 0)
            .scratch(softmax_scratch),
        OpDef::onnx("LogSoftmax", 1, softmax, FlopRule::PerOutput(cost::SOFTMAX))
            .inplace(0, 0)
            .scratch(softmax_scratch),
        OpDef::onnx(
            "LayerNormalization",
            1,
            layer_norm,
            FlopRule::PerOutput(cost::LAYER_NORM),
        )
        .optional_tail(),
        OpDef::onnx(
            "SimplifiedLayerNormalization",
            1,
            simplified_layer_norm,
            FlopRule::PerOutput(cost::RMS_NORM),
        )
        .optional_tail(),
        OpDef::onnx(
            "BatchNormalization",
            15,
            batch_norm,
            FlopRule::PerOutput(cost::LAYER_NORM),
        )
        .optional_tail(),
        OpDef::onnx(
            "InstanceNormalization",
            6,
            like_input,
            FlopRule::PerOutput(cost::LAYER_NORM),
        ),
        OpDef::onnx(
            "GroupNormalization",
            18,
            like_input,
            FlopRule::PerOutput(cost::LAYER_NORM),
        ),
        OpDef::onnx(
            "MeanVarianceNormalization",
            9,
            like_input,
            FlopRule::PerOutput(cost::LAYER_NORM),
        ),
        OpDef::onnx(
            "LpNormalization",
            1,
            like_input,
            FlopRule::PerOutput(cost::LP_NORM),
        ),
        OpDef::ms(
            "SkipLayerNormalization",
            skip_layer_norm,
            FlopRule::PerOutput(cost::SKIP_LAYER_NORM),
        ),
        OpDef::ms(
            "SkipSimplifiedLayerNormalization",
            skip_layer_norm,
            FlopRule::PerOutput(cost::LAYER_NORM),
        ),
        OpDef::ms(
            "BiasSoftmax",
            like_input,
            FlopRule::PerOutput(cost::BIAS_SOFTMAX),
        ),
    ]
}
