//! FLOP costs. Every per-element constant lives here, with what it counts; the op
//! families refer to them by name. A multiply-add counts 2; a transcendental (exp, tanh,
//! erf, rsqrt) counts 1 like any other elementwise op: the numbers rank recompute
//! candidates, they do not predict time.

use crate::graph::Graph;
use crate::ids::NodeId;
use crate::shape::Bindings;

use super::ctx::{FlopCtx, FlopError};
use super::types::Types;
use super::{op_def, FlopRule};

/// Unary and binary elementwise ops (Add, Mul, Relu, Exp, Erf, Cast, Where, compare…),
/// per output element.
pub const ELEMENTWISE: u64 = 1;
/// Clip: a max and a min per element.
pub const CLIP: u64 = 2;
/// Gelu with erf: x·0.5·(1 + erf(x/√2)) = mul, erf, add, mul, mul.
pub const GELU: u64 = 5;
/// Gelu with tanh (and FastGelu): x·0.5·(1 + tanh(√(2/π)(x + 0.044715x³))) = 3 mul for
/// the cube term, add, mul, tanh, add, 2 mul.
pub const GELU_TANH: u64 = 9;
/// com.microsoft BiasGelu: the bias add, then Gelu.
pub const BIAS_GELU: u64 = GELU + ELEMENTWISE;
/// GeluGrad / FastGeluGrad: recompute the inner term and its derivative, times dY.
pub const GELU_GRAD: u64 = 14;
/// BiasGeluGrad_dX / BiasFastGeluGrad_dX: the bias add, then GeluGrad.
pub const BIAS_GELU_GRAD: u64 = GELU_GRAD + ELEMENTWISE;
/// ReluGrad, TanhGrad, SigmoidGrad, DropoutGrad: a select or 2–3 multiplies.
pub const ACTIVATION_GRAD: u64 = 3;
/// Softmax / LogSoftmax over an axis: max, subtract, exp, sum, divide (or log), per element.
pub const SOFTMAX: u64 = 5;
/// com.microsoft BiasSoftmax: the bias add, then Softmax.
pub const BIAS_SOFTMAX: u64 = SOFTMAX + ELEMENTWISE;
/// SoftmaxGrad / LogSoftmaxGrad: a dot product per row, subtract, multiply.
pub const SOFTMAX_GRAD: u64 = 4;
/// LayerNormalization: mean (add), centre (sub), square-and-sum (2), scale by inv std
/// (mul), weight (mul), bias (add) = 7 per element; the per-row rsqrt is ignored.
pub const LAYER_NORM: u64 = 7;
/// SimplifiedLayerNormalization (RMSNorm): LayerNorm without the mean and the bias:
/// square-and-sum (2), scale by inv rms (1), weight (1), plus the rsqrt pass (1).
pub const RMS_NORM: u64 = LAYER_NORM - 2;
/// SkipLayerNormalization: the skip (and bias) adds, then LayerNorm.
pub const SKIP_LAYER_NORM: u64 = LAYER_NORM + 2;
/// LpNormalization: |x|^p and sum (2), scale (1), per element, plus the per-row root.
pub const LP_NORM: u64 = LAYER_NORM - 3;
/// LayerNormalizationGrad: ~2.5× the forward (dX plus weight and bias gradient sums).
pub const LAYER_NORM_GRAD: u64 = 18;
/// SimplifiedLayerNormalizationGrad: no mean and no bias gradient.
pub const RMS_NORM_GRAD: u64 = LAYER_NORM_GRAD - 4;
/// SoftmaxCrossEntropyLoss: log-softmax (5) plus the gather and reduction (1) per logit.
pub const SOFTMAX_CROSS_ENTROPY: u64 = 6;
/// SoftmaxCrossEntropyLossGrad: exp of log-prob, subtract one-hot, scale, per logit.
pub const SOFTMAX_CROSS_ENTROPY_GRAD: u64 = 3;
/// Reductions (ReduceSum, ReduceMean, ReduceMax…), per input element.
pub const REDUCTION: u64 = 1;
/// Dropout (training): one random number, a compare and a scale per element.
pub const DROPOUT: u64 = 3;
/// BiasDropout: the bias add and the residual add, then Dropout.
pub const BIAS_DROPOUT: u64 = DROPOUT + 2;
/// Pools: one op per window element per output element.
pub const POOL: u64 = 1;
/// Ops that copy or materialise data without arithmetic (Transpose, Concat, Split, Slice,
/// Gather*, Scatter*, Expand, Tile, Pad, ConstantOfShape, EyeLike, OneHot), per element
/// written: memory-bound, so not free to recompute. Alias ops (Reshape, Squeeze, Unsqueeze,
/// Flatten, Identity) write nothing and stay at 0.
pub const DATA_MOVEMENT: u64 = 1;
/// Random generators, per output element.
pub const RANDOM: u64 = 1;

/// FLOPs of one execution of `node` under `b` (symbolic dims must be bound).
pub fn flops(graph: &Graph, node: NodeId, types: &Types, b: &Bindings) -> Result<u64, FlopError> {
    let n = graph.node(node);
    let def = op_def(graph, node).ok_or_else(|| FlopError::NotInRegistry {
        node: n.display_name(node),
        op: n.op_label(),
    })?;
    let ctx = FlopCtx {
        graph,
        id: node,
        node: n,
        types,
        bindings: b,
    };
    match def.flops {
        FlopRule::Zero => Ok(0),
        FlopRule::PerOutput(k) => {
            let e = ctx.numel(ctx.out_shape(0)?)?;
            ctx.product(&[e, k])
        }
        FlopRule::PerInput(i, k) => {
            let e = ctx.numel(ctx.in_shape(i)?)?;
            ctx.product(&[e, k])
        }
        FlopRule::Custom(f) => f(&ctx),
    }
}
