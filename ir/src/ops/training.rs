//! ONNX Runtime training ops (com.microsoft, version 1), from
//! `orttraining/orttraining/core/graph/training_op_defs.cc`: activation and normalization
//! gradients, gather/slice gradients, ConcatTraining, accumulators, YieldOp, optimizers
//! and collectives.
//!
//! Every entry here exists only in ORT's training build. Accumulators, optimizers, collectives and control ops are `Stateful`: they write a
//! buffer the caller owns or synchronise with the outside. InPlaceAccumulator(V2) and
//! ZeroGradient alias their buffer (`.Alias(0, 0)` / `.Alias(0, 1)` in
//! `orttraining/training_ops/cpu/optimizer/gradient_control.cc`).

use crate::dtype::DType;
use crate::shape::{Dim, Shape};

use super::cost;
use super::ctx::{declared, out, FlopCtx, FlopError, InferCtx};
use super::types::TensorType;
use super::{FlopRule, OpDef, OptimizerStep, Policy};

type Out = Result<Vec<Option<TensorType>>, String>;

/// Output 0 shaped like input `i`, in input 0's dtype (gradients: dX like X, dtype of dY).
fn grad_like(ctx: &InferCtx<'_>, i: usize) -> Out {
    Ok(vec![out(ctx.dtype(0)?, ctx.shape(i)?.clone())])
}

fn like_dy(ctx: &InferCtx<'_>) -> Out {
    grad_like(ctx, 0)
}

fn like_input1(ctx: &InferCtx<'_>) -> Out {
    grad_like(ctx, 1)
}

/// LayerNormalizationGrad (dY, X, scale, mean, inv_std) and the Simplified/Invertible
/// variants: dX like X (input 1), then the scale (and bias) gradients like the scale.
fn layer_norm_grad(ctx: &InferCtx<'_>) -> Out {
    let scale = ctx.input(2)?;
    let mut v = vec![out(ctx.dtype(0)?, ctx.shape(1)?.clone())];
    for _ in 1..ctx.n_outputs() {
        v.push(out(scale.dtype, scale.shape.clone()));
    }
    Ok(v)
}

/// A gradient whose shape is the value of input `i` (GatherGrad, SliceGrad…), in the
/// dtype of input `g`.
fn shaped_by_value(ctx: &InferCtx<'_>, i: usize, g: usize) -> Out {
    let dims = ctx
        .value(i)
        .ok_or_else(|| format!("shape input {i} is not computable"))?;
    Ok(vec![out(ctx.dtype(g)?, Shape(dims.to_vec()))])
}

fn gather_grad(ctx: &InferCtx<'_>) -> Out {
    shaped_by_value(ctx, 0, 2)
}

fn slice_grad(ctx: &InferCtx<'_>) -> Out {
    shaped_by_value(ctx, 1, 0)
}

fn gather_elements_grad(ctx: &InferCtx<'_>) -> Out {
    shaped_by_value(ctx, 1, 0)
}

fn gather_nd_grad(ctx: &InferCtx<'_>) -> Out {
    shaped_by_value(ctx, 0, 2)
}

/// InPlaceAccumulatorV2 (buffer, value, overwrite?): a bool "updated" flag of shape [1],
/// and optionally the accumulated buffer.
fn accumulator_v2(ctx: &InferCtx<'_>) -> Out {
    let buf = ctx.input(0)?;
    Ok(vec![
        out(DType::Bool, Shape::known(&[1])),
        out(buf.dtype, buf.shape.clone()),
    ])
}

/// Outputs mirror inputs one to one (collectives, pass-throughs).
fn mirror(ctx: &InferCtx<'_>) -> Out {
    (0..ctx.n_outputs())
        .map(|i| Ok(out(ctx.dtype(i)?, ctx.shape(i)?.clone())))
        .collect()
}

/// YieldOp: output i is the gradient of input i (its dtype); its shape is input i's when
/// i is listed in `full_shape_outputs`, else the one value_info declares (ORT leaves it
/// open), else input i's with a warning.
fn yield_op(ctx: &InferCtx<'_>) -> Out {
    let full = ctx.attr_ints("full_shape_outputs").unwrap_or_default();
    (0..ctx.n_outputs())
        .map(|i| {
            let x = ctx.input(i)?;
            let declared = ctx.node.outputs[i].map(|t| ctx.graph.tensor(t)).and_then(|t| t.shape.clone());
            let shape = match declared {
                Some(s) if !full.contains(&(i as i64)) => s,
                None if !full.contains(&(i as i64)) => {
                    ctx.warn(format!("output {i} is not full-shape and has no value_info: assumed like input {i}"));
                    x.shape.clone()
                }
                _ => x.shape.clone(),
            };
            Ok(out(x.dtype, shape))
        })
        .collect()
}

/// ExpandGrad (dY, X_shape): dX shaped by the value of X_shape, in dY's dtype.
fn expand_grad(ctx: &InferCtx<'_>) -> Out {
    shaped_by_value(ctx, 1, 0)
}

/// BatchNormalizationInternal (X, scale, B, input_mean, input_var): Y like X, then the
/// running mean and variance and the saved mean and inverse std, shaped like the scale,
/// in the dtype of input_mean.
fn batch_norm_internal(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let c = ctx.shape(1)?.clone();
    let mut v = vec![out(x.dtype, x.shape.clone())];
    for _ in 1..ctx.n_outputs() {
        v.push(out(ctx.dtype(3)?, c.clone()));
    }
    Ok(v)
}

/// ReduceAllL2 (X…): one scalar, the L2 norm over every input. Its dtype (`TOut`) is not
/// fixed by the inputs: value_info's when declared, else input 0's.
fn reduce_all_l2(ctx: &InferCtx<'_>) -> Out {
    let declared = ctx.node.outputs[0].and_then(|t| ctx.graph.tensor(t).dtype);
    let dtype = match declared {
        Some(d) => d,
        None => {
            ctx.warn("output dtype not declared: assumed like input 0".to_string());
            ctx.dtype(0)?
        }
    };
    Ok(vec![out(dtype, Shape(Vec::new()))])
}

/// MixedPrecisionScale (S, X…): each X scaled by S and cast to `to`; with
/// `fuse_outputs`, one 1-D output holding every element.
fn mixed_precision_scale(ctx: &InferCtx<'_>) -> Out {
    let code = ctx
        .attr_i("to")
        .ok_or("MixedPrecisionScale has no `to` attribute")?;
    let to = DType::from_code(code as i32).ok_or_else(|| format!("unknown dtype code {code}"))?;
    if ctx.attr_i("fuse_outputs").unwrap_or(0) != 0 {
        let mut total = Dim::Known(0);
        for i in 1..ctx.n_inputs() {
            total = total.add(&ctx.shape(i)?.numel());
        }
        return Ok(vec![out(to, Shape(vec![total]))]);
    }
    (1..ctx.n_inputs())
        .map(|i| Ok(out(to, ctx.shape(i)?.clone())))
        .collect()
}

/// FLOPs of the variadic ops: `k` per element of every input from `first` on.
fn per_variadic_input(ctx: &FlopCtx<'_>, first: usize, k: u64) -> Result<u64, FlopError> {
    let mut terms = Vec::new();
    for i in (first..ctx.node.inputs.len()).filter(|&i| ctx.has_input(i)) {
        let n = ctx.numel(ctx.in_shape(i)?)?;
        terms.push(ctx.product(&[n, k])?);
    }
    ctx.sum(&terms)
}

/// ReduceAllL2: a square and an add per element of every input.
fn reduce_all_l2_flops(ctx: &FlopCtx<'_>) -> Result<u64, FlopError> {
    per_variadic_input(ctx, 0, 2 * cost::REDUCTION)
}

/// MixedPrecisionScale: a multiply (and the cast) per element of every scaled input.
fn mixed_precision_scale_flops(ctx: &FlopCtx<'_>) -> Result<u64, FlopError> {
    per_variadic_input(ctx, 1, cost::ELEMENTWISE)
}

fn split_training(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    let axis = super::ctx::norm_axis(ctx.attr_i("axis").unwrap_or(0), x.shape.rank())?;
    let sizes = ctx.const_ints(1, "split")?;
    if sizes.len() != ctx.n_outputs() {
        return Err(format!(
            "{} split sizes for {} outputs",
            sizes.len(),
            ctx.n_outputs()
        ));
    }
    Ok(sizes
        .into_iter()
        .map(|s| {
            let mut d = x.shape.0.clone();
            d[axis] = Dim::Known(s.max(0) as u64);
            out(x.dtype, Shape(d))
        })
        .collect())
}

pub(super) fn ops() -> Vec<OpDef> {
    let act = FlopRule::PerOutput(cost::ACTIVATION_GRAD);
    let accumulate = Policy::Stateful("accumulates into a caller-owned buffer in place");
    let optimizer = Policy::Stateful("optimizer step: updates parameters and optimizer state");
    let collective = Policy::Stateful("collective communication: synchronises with other ranks");
    let control = Policy::Stateful("hands control to or synchronises with the caller");
    let python = Policy::Stateful("runs arbitrary Python (may have side effects)");
    let mut v = vec![
        OpDef::ms(
            "GeluGrad",
            like_input1,
            FlopRule::PerOutput(cost::GELU_GRAD),
        ),
        OpDef::ms(
            "FastGeluGrad",
            like_input1,
            FlopRule::PerOutput(cost::GELU_GRAD),
        ),
        OpDef::ms(
            "BiasGeluGrad_dX",
            like_input1,
            FlopRule::PerOutput(cost::BIAS_GELU_GRAD),
        ),
        OpDef::ms(
            "BiasFastGeluGrad_dX",
            like_input1,
            FlopRule::PerOutput(cost::BIAS_GELU_GRAD),
        ),
        OpDef::ms(
            "QuickGeluGrad",
            like_dy,
            FlopRule::PerOutput(cost::GELU_GRAD),
        ),
        OpDef::ms("ReluGrad", like_dy, act),
        OpDef::ms("SigmoidGrad", like_dy, act),
        OpDef::ms("TanhGrad", like_dy, act),
        OpDef::ms("DropoutGrad", like_dy, act),
        OpDef::ms("BitmaskDropoutGrad", like_dy, act),
        OpDef::ms(
            "SoftmaxGrad",
            like_input1,
            FlopRule::PerOutput(cost::SOFTMAX_GRAD),
        ),
        OpDef::ms(
            "SoftmaxGrad_13",
            like_input1,
            FlopRule::PerOutput(cost::SOFTMAX_GRAD),
        ),
        OpDef::ms(
            "LogSoftmaxGrad",
            like_input1,
            FlopRule::PerOutput(cost::SOFTMAX_GRAD),
        ),
        OpDef::ms(
            "LogSoftmaxGrad_13",
            like_input1,
            FlopRule::PerOutput(cost::SOFTMAX_GRAD),
        ),
        OpDef::ms(
            "LayerNormalizationGrad",
            layer_norm_grad,
            FlopRule::PerInput(1, cost::LAYER_NORM_GRAD),
        ),
        OpDef::ms(
            "SimplifiedLayerNormalizationGrad",
            layer_norm_grad,
            FlopRule::PerInput(1, cost::RMS_NORM_GRAD),
        ),
        OpDef::ms(
            "InvertibleLayerNormalizationGrad",
            layer_norm_grad,
            FlopRule::PerInput(1, cost::LAYER_NORM_GRAD),
        ),
        OpDef::ms(
            "GatherGrad",
            gather_grad,
            FlopRule::PerInput(2, cost::ELEMENTWISE),
        ),
        OpDef::ms(
            "GatherElementsGrad",
            gather_elements_grad,
            FlopRule::PerInput(0, cost::ELEMENTWISE),
        ),
        OpDef::ms(
            "GatherNDGrad",
            gather_nd_grad,
            FlopRule::PerInput(2, cost::ELEMENTWISE),
        ),
        OpDef::ms("SliceGrad", slice_grad, FlopRule::Zero),
        OpDef::ms("ConcatTraining", super::shape_ops::concat, FlopRule::Zero),
        OpDef::ms("SplitTraining", split_training, FlopRule::Zero),
        OpDef::ms("Scale", like_dy, FlopRule::PerOutput(cost::ELEMENTWISE)),
        OpDef::ms(
            "InPlaceAccumulatorV2",
            accumulator_v2,
            FlopRule::PerInput(1, cost::ELEMENTWISE),
        )
        .alias(1, 0)
        .policy(accumulate)
        .optimizer_step(OptimizerStep::Accumulate),
        OpDef::ms(
            "InPlaceAccumulator",
            like_dy,
            FlopRule::PerInput(1, cost::ELEMENTWISE),
        )
        .alias(0, 0)
        .policy(accumulate)
        .optimizer_step(OptimizerStep::Accumulate),
        OpDef::ms("ZeroGradient", like_dy, FlopRule::Zero)
            .alias(0, 0)
            .policy(accumulate)
            .optimizer_step(OptimizerStep::Update),
        OpDef::ms(
            "ExpandGrad",
            expand_grad,
            FlopRule::PerInput(0, cost::REDUCTION),
        ),
        OpDef::ms(
            "FakeQuantGrad",
            like_dy,
            FlopRule::PerOutput(cost::ELEMENTWISE),
        ),
        OpDef::ms(
            "BatchNormalizationInternal",
            batch_norm_internal,
            FlopRule::PerOutput(cost::LAYER_NORM),
        )
        .optional_tail(),
        OpDef::ms(
            "ReduceAllL2",
            reduce_all_l2,
            FlopRule::Custom(reduce_all_l2_flops),
        ),
        OpDef::ms(
            "MixedPrecisionScale",
            mixed_precision_scale,
            FlopRule::Custom(mixed_precision_scale_flops),
        ),
        OpDef::ms("YieldOp", yield_op, FlopRule::Zero).policy(control),
    ];
    for op in [
        "AdamOptimizer",
        "AdamWOptimizer",
        "SGDOptimizer",
        "SGDOptimizerV2",
        "LambOptimizer",
        "ClipGradNorm",
    ] {
        let def = OpDef::ms(op, declared, FlopRule::Zero).policy(optimizer);
        // ClipGradNorm rescales gradients before the step; it updates no state.
        v.push(if op == "ClipGradNorm" {
            def
        } else {
            def.optimizer_step(OptimizerStep::Update)
        });
    }
    for op in [
        "NcclAllReduce",
        "NcclAllGather",
        "NcclReduceScatter",
        "AdasumAllReduce",
        "HorovodAllReduce",
    ] {
        v.push(OpDef::ms(op, mirror, FlopRule::Zero).policy(collective));
    }
    for op in [
        "Send",
        "Recv",
        "WaitEvent",
        "RecordEvent",
        "Group",
        "PassThrough",
    ] {
        v.push(OpDef::ms(op, declared, FlopRule::Zero).policy(
            if op.ends_with("Event") || op == "Group" || op == "PassThrough" {
                control
            } else {
                collective
            },
        ));
    }
    for op in ["PythonOp", "PythonOpGrad"] {
        v.push(OpDef::ms(op, declared, FlopRule::Zero).policy(python));
    }
    v.into_iter().map(OpDef::training).collect()
}
