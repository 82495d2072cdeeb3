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
//!
//! This module owns the helpers every family shares and the registry table; `views.rs` the
//! ops that read or rearrange a tensor's dims, `movement.rs` those that select, join or
//! repeat its elements, `generators.rs` those that make a tensor from a shape or attributes.

mod generators;
mod movement;
mod views;

use crate::shape::Dim;

use super::cost;
use super::ctx::{declared, InferCtx};
use super::types::TensorType;
use super::value::MAX_VALUE_ELEMS;
use super::{FlopRule, IndexUse, OpDef};
use generators::{constant, constant_of_shape, eye_like, one_hot, range};
pub(crate) use movement::concat;
use movement::{
    expand, gather, gather_elements, gather_nd, like_data, pad, slice, split, tile, top_k,
};
use views::{flatten, identity, reshape, shape_op, size_op, squeeze, transpose, unsqueeze};

/// What an op's shape rule returns.
type Out = Result<Vec<Option<TensorType>>, String>;

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

/// The family's registry entries.
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
