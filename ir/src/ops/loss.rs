//! Losses: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss (ONNX 12+), ORT's
//! com.microsoft SoftmaxCrossEntropyLossInternal, and their gradients.

use crate::shape::Shape;

use super::cost;
use super::ctx::{out, InferCtx};
use super::types::TensorType;
use super::{FlopRule, IndexUse, OpDef};

type Out = Result<Vec<Option<TensorType>>, String>;

/// The loss shape: the labels' shape for `reduction = none`, else a scalar.
fn loss_shape(ctx: &InferCtx<'_>, labels: usize) -> Result<Shape, String> {
    match ctx.attr_s("reduction").as_deref().unwrap_or("mean") {
        "none" => Ok(ctx.shape(labels)?.clone()),
        "mean" | "sum" => Ok(Shape(vec![])),
        r => Err(format!("unknown reduction `{r}`")),
    }
}

/// Outputs: loss, and log-probabilities shaped like the scores.
fn softmax_cross_entropy(ctx: &InferCtx<'_>) -> Out {
    let scores = ctx.input(0)?;
    Ok(vec![
        out(scores.dtype, loss_shape(ctx, 1)?),
        out(scores.dtype, scores.shape.clone()),
    ])
}

fn nll(ctx: &InferCtx<'_>) -> Out {
    Ok(vec![out(ctx.dtype(0)?, loss_shape(ctx, 1)?)])
}

/// Gradient with respect to the logits: shaped like the log-probabilities (input 1).
fn logits_grad(ctx: &InferCtx<'_>) -> Out {
    let lp = ctx.input(1)?;
    Ok(vec![out(ctx.dtype(0)?, lp.shape.clone())])
}

pub(super) fn ops() -> Vec<OpDef> {
    vec![
        OpDef::onnx(
            "SoftmaxCrossEntropyLoss",
            12,
            softmax_cross_entropy,
            FlopRule::PerInput(0, cost::SOFTMAX_CROSS_ENTROPY),
        )
        .index_use(IndexUse::Labels),
        OpDef::onnx(
            "NegativeLogLikelihoodLoss",
            12,
            nll,
            FlopRule::PerInput(1, cost::ELEMENTWISE),
        )
        .index_use(IndexUse::Labels),
        OpDef::ms(
            "SoftmaxCrossEntropyLossInternal",
            softmax_cross_entropy,
            FlopRule::PerInput(0, cost::SOFTMAX_CROSS_ENTROPY),
        )
        .index_use(IndexUse::Labels)
        .training(),
        OpDef::ms(
            "SoftmaxCrossEntropyLossGrad",
            logits_grad,
            FlopRule::PerOutput(cost::SOFTMAX_CROSS_ENTROPY_GRAD),
        )
        .training(),
        OpDef::ms(
            "SoftmaxCrossEntropyLossInternalGrad",
            logits_grad,
            FlopRule::PerOutput(cost::SOFTMAX_CROSS_ENTROPY_GRAD),
        )
        .training(),
    ]
}
