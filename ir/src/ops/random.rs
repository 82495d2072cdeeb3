//! Ops that draw random numbers: never recomputed (a recompute would draw another mask or
//! sample than the backward pass was built on). Dropout is stochastic only in training
//! mode: from opset 12 its `training_mode` input decides (absent or a constant false:
//! Identity, recomputable), and a constant ratio of 0 is a copy even in training mode (ONNX
//! spec, and ORT's kernels); opsets 7–11 have no training mode (ONNX Runtime runs them as
//! Identity); opsets 1–6 train unless `is_test` is set.
//!
//! ONNX Runtime's own memory optimizer does recompute Dropout, by first giving the original
//! and the clone the same `seed` attribute so both kernels draw the same masks step by step
//! (`SetSeedForDropoutNode`); this registry stays conservative and keeps them.

use crate::dtype::DType;
use crate::graph::Graph;
use crate::ids::NodeId;
use crate::shape::{Dim, Shape};

use super::cost;
use super::ctx::{out, InferCtx};
use super::types::TensorType;
use super::value::{constant_f64, constant_i64};
use super::{FlopRule, OpDef, Policy, SeedAttr};

type Out = Result<Vec<Option<TensorType>>, String>;

const TRAINING_DROPOUT: &str = "dropout in training mode draws a new mask on every run";
const DYNAMIC_TRAINING_MODE: &str = "dropout's training_mode is not a constant: it may draw a mask";
const RANDOM: &str = "draws random numbers: a recompute would differ";

/// The policy of a dropout whose ratio is input `ratio` (absent = 0.5) and whose
/// `training_mode` is input `ratio + 1` (absent = inference).
fn dropout_policy_at(graph: &Graph, node: NodeId, ratio: usize) -> Policy {
    let n = graph.node(node);
    let input = |i: usize| n.inputs.get(i).copied().flatten();
    let zero_ratio = input(ratio)
        .and_then(|t| constant_f64(graph, t))
        .is_some_and(|v| v == [0.0]);
    match input(ratio + 1) {
        None => Policy::Recomputable,
        Some(_) if zero_ratio => Policy::Recomputable,
        Some(t) => match constant_i64(graph, t).as_deref() {
            Some([0]) => Policy::Recomputable,
            Some([_]) => Policy::Stochastic(TRAINING_DROPOUT),
            _ => Policy::Stochastic(DYNAMIC_TRAINING_MODE),
        },
    }
}

fn dropout_policy(graph: &Graph, node: NodeId) -> Policy {
    let n = graph.node(node);
    let opset = graph.opset(&n.domain).unwrap_or(i64::MAX);
    if opset >= 12 {
        dropout_policy_at(graph, node, 1)
    } else if opset >= 7 || n.attr_i("is_test").unwrap_or(0) != 0 {
        Policy::Recomputable
    } else {
        Policy::Stochastic(TRAINING_DROPOUT)
    }
}

fn ms_dropout_policy(graph: &Graph, node: NodeId) -> Policy {
    dropout_policy_at(graph, node, 1)
}

/// BiasDropout (data, bias, residual, ratio, training_mode).
fn bias_dropout_policy(graph: &Graph, node: NodeId) -> Policy {
    dropout_policy_at(graph, node, 3)
}

/// Output like the data; mask a bool tensor of the same shape (uint32 words for bitmask
/// variants: one bit per element, rounded up to 32). ONNX's Dropout takes its ratio and
/// training mode as scalars.
fn dropout(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    if ctx.node.op_type == "Dropout" && ctx.node.domain == crate::graph::ONNX_DOMAIN {
        for (i, what) in [(1, "ratio"), (2, "training_mode")] {
            if ctx.has(i) && !ctx.shape(i)?.0.is_empty() {
                return Err(format!(
                    "its {what} (input #{i}) has shape {}, where ONNX takes a scalar",
                    ctx.shape(i)?
                ));
            }
        }
    }
    let bitmask = ctx.node.op_type.starts_with("Bitmask");
    let shape = if ctx.node.op_type.contains("Bias") && ctx.has(1) {
        ctx.broadcast(&[&x.shape, ctx.shape(1)?])?
    } else {
        x.shape.clone()
    };
    let mask = if bitmask {
        let words = match shape.numel().known() {
            Some(n) => Dim::Known(n.div_ceil(32)),
            None => shape
                .numel()
                .div_exact(&Dim::Known(32))
                .ok_or("bitmask size of a symbolic element count not divisible by 32")?,
        };
        out(DType::U32, Shape(vec![words]))
    } else {
        let md = if ctx.opset < 10 && ctx.node.domain == crate::graph::ONNX_DOMAIN {
            x.dtype
        } else {
            DType::Bool
        };
        out(md, shape.clone())
    };
    Ok(vec![out(x.dtype, shape), mask])
}

fn dtype_attr(ctx: &InferCtx<'_>, default: DType) -> Result<DType, String> {
    match ctx.attr_i("dtype") {
        Some(c) => DType::from_code(c as i32).ok_or_else(|| format!("unknown dtype code {c}")),
        None => Ok(default),
    }
}

fn random_like(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.input(0)?;
    Ok(vec![out(dtype_attr(ctx, x.dtype)?, x.shape.clone())])
}

fn random_shaped(ctx: &InferCtx<'_>) -> Out {
    let s = ctx.attr_ints("shape").ok_or("no shape attribute")?;
    Ok(vec![out(
        dtype_attr(ctx, DType::F32)?,
        Shape(s.into_iter().map(|d| Dim::Known(d.max(0) as u64)).collect()),
    )])
}

fn multinomial(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.shape(0)?;
    let n = ctx.attr_i("sample_size").unwrap_or(1);
    let b =
        x.0.first()
            .cloned()
            .ok_or("Multinomial input must be [batch, classes]")?;
    Ok(vec![out(
        dtype_attr(ctx, DType::I32)?,
        Shape(vec![b, Dim::Known(n as u64)]),
    )])
}

pub(super) fn ops() -> Vec<OpDef> {
    let per = FlopRule::PerOutput(cost::RANDOM);
    let stochastic = Policy::Stochastic(RANDOM);
    vec![
        OpDef::onnx("Dropout", 1, dropout, FlopRule::PerOutput(cost::DROPOUT))
            .dynamic(dropout_policy)
            .optional_tail()
            .seed(SeedAttr::Int),
        OpDef::ms(
            "BitmaskDropout",
            dropout,
            FlopRule::PerOutput(cost::DROPOUT),
        )
        .dynamic(ms_dropout_policy)
        .seed(SeedAttr::Int),
        OpDef::ms(
            "BiasDropout",
            dropout,
            FlopRule::PerOutput(cost::BIAS_DROPOUT),
        )
        .dynamic(bias_dropout_policy)
        .seed(SeedAttr::Int),
        OpDef::ms(
            "BitmaskBiasDropout",
            dropout,
            FlopRule::PerOutput(cost::BIAS_DROPOUT),
        )
        .dynamic(bias_dropout_policy)
        .seed(SeedAttr::Int),
        OpDef::onnx("RandomUniformLike", 1, random_like, per)
            .policy(stochastic)
            .seed(SeedAttr::Float),
        OpDef::onnx("RandomNormalLike", 1, random_like, per)
            .policy(stochastic)
            .seed(SeedAttr::Float),
        OpDef::onnx("RandomUniform", 1, random_shaped, per)
            .policy(stochastic)
            .seed(SeedAttr::Float),
        OpDef::onnx("RandomNormal", 1, random_shaped, per)
            .policy(stochastic)
            .seed(SeedAttr::Float),
        OpDef::onnx("Bernoulli", 15, random_like, per)
            .policy(stochastic)
            .seed(SeedAttr::Float),
        OpDef::onnx("Multinomial", 7, multinomial, per)
            .policy(stochastic)
            .seed(SeedAttr::Float),
    ]
}
