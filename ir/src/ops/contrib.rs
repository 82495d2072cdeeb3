//! Contrib ops that ONNX Runtime's graph optimizer writes into the graph it saves at levels
//! basic, extended and all (ORT's offline mode), when no exporter emits them: the fused
//! forms the CPU EP's transformers create. ORT 1.31.1's CPU EP emits, on every fixture and
//! the example (`docs/design/ort-internals.md`, "Optimization levels"): `FusedMatMul` (the matmul
//! family, `matmul.rs`) and `FusedGemm` (here). At level extended and above it also fuses a
//! Conv whose output only an activation reads into `FusedConv` (here): none of the fixtures
//! has one (their Convs feed batch norm or a reshape, or the backward reads the Conv's
//! output), a user's graph may.
//!
//! `FusedGemm` (`contrib_ops/cpu/fused_gemm.cc`) is ORT's `Gemm<float>` kernel with the
//! `activation` attribute applied to Y in place: the shapes of Gemm, Gemm's FLOPs plus one per
//! output element for the activation, no alias and no `MayInplace` (the kernel registers
//! neither), and no scratch (Gemm broadcasts C into Y and multiplies into Y).
//!
//! `FusedConv` (`contrib_ops/cpu/fused_conv.cc`) is ORT's `Conv<float>` kernel with the
//! activation passed to MLAS: Conv's shapes and scratch (`MlasConvPrepare`'s working buffer,
//! taken after the output, the same with or without an activation), Conv's FLOPs plus one per
//! output element for the activation and one for the optional sum input `Z` (slot 3), which
//! the kernel registers `.MayInplace(3, 0)` (Y takes Z's buffer when this node is its last
//! reader; otherwise Z is copied into Y, no temporary).
//!
//! The NCHWc layout ops (`com.microsoft.nchwc` `Conv`, `ReorderInput`, `ReorderOutput`, …)
//! that level all writes for a Conv with constant weights are not modelled: their shapes
//! depend on the CPU's block size (`MlasNchwcGetBlockSize`: 16 floats with AVX-512, 8 with
//! AVX2, none without, when the transformer is skipped) and training graphs take their
//! weights as inputs, so they do not appear in them.

use super::cost;
use super::ctx::{FlopCtx, FlopError};
use super::matmul::{conv, conv_flops, conv_scratch, gemm, gemm_flops};
use super::{FlopRule, OpDef};

/// Gemm, then the activation on each output element.
fn fused_gemm_flops(ctx: &FlopCtx<'_>) -> Result<u64, FlopError> {
    let gemm = gemm_flops(ctx)?;
    let activation = if ctx.node.attr_s("activation").is_some_and(|a| !a.is_empty()) {
        ctx.numel(ctx.out_shape(0)?)?
            .saturating_mul(cost::ELEMENTWISE)
    } else {
        0
    };
    gemm.checked_add(activation).ok_or(FlopError::Overflow {
        node: ctx.node.display_name(ctx.id),
    })
}

/// Conv, then the sum input's addition and the activation on each output element.
fn fused_conv_flops(ctx: &FlopCtx<'_>) -> Result<u64, FlopError> {
    let conv = conv_flops(ctx)?;
    let per_element = u64::from(ctx.node.attr_s("activation").is_some_and(|a| !a.is_empty()))
        + u64::from(ctx.has_input(3));
    let y = ctx.numel(ctx.out_shape(0)?)?;
    conv.checked_add(y.saturating_mul(per_element * cost::ELEMENTWISE))
        .ok_or(FlopError::Overflow {
            node: ctx.node.display_name(ctx.id),
        })
}

pub(super) fn ops() -> Vec<OpDef> {
    vec![
        OpDef::ms("FusedGemm", gemm, FlopRule::Custom(fused_gemm_flops)),
        OpDef::ms("FusedConv", conv, FlopRule::Custom(fused_conv_flops))
            .scratch(conv_scratch)
            .inplace(0, 3),
    ]
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::build::{attr_i, attr_s, ModelBuilder};
    use crate::ops::{alias, flops, infer, kernel_scratch, may_inplace, policy, Policy};
    use crate::{import_model, Bindings, DType};

    #[test]
    fn fused_gemm_is_gemm_with_an_activation() {
        let m = ModelBuilder::new(17)
            .opset("com.microsoft", 1)
            .input("x", DType::F32, "n,32")
            .input("w", DType::F32, "64,32")
            .input("b", DType::F32, "64")
            .node_in(
                "com.microsoft",
                "FusedGemm",
                &["x", "w", "b"],
                &["y"],
                vec![attr_i("transB", 1), attr_s("activation", "Relu")],
            )
            .node_in(
                "com.microsoft",
                "FusedGemm",
                &["x", "w", "b"],
                &["z"],
                vec![attr_i("transB", 1)],
            )
            .output("y", DType::F32, "")
            .output("z", DType::F32, "")
            .build();
        let g = import_model(m, Path::new("fused_gemm.onnx"), None).unwrap();
        let t = infer(&g).unwrap();
        let y = g.tensor_id("y").unwrap();
        let tt = t.get(y).unwrap();
        assert_eq!(format!("{}{}", tt.dtype, tt.shape), "f32[n,64]");
        let b: Bindings = [("n".to_string(), 8)].into();
        let relu = g.tensor(y).producer().unwrap();
        let plain = g.tensor(g.tensor_id("z").unwrap()).producer().unwrap();
        // 2·n·64·32 for the product, n·64 for the bias, n·64 for the Relu.
        assert_eq!(flops(&g, plain, &t, &b).unwrap(), 2 * 8 * 64 * 32 + 8 * 64);
        assert_eq!(
            flops(&g, relu, &t, &b).unwrap(),
            2 * 8 * 64 * 32 + 2 * 8 * 64
        );
        assert_eq!(alias(&g, relu), None);
        assert_eq!(may_inplace(&g, relu), None);
        assert!(kernel_scratch(&g, relu, &b, 1).before.is_empty());
        assert!(kernel_scratch(&g, relu, &b, 1).after.is_empty());
        assert_eq!(policy(&g, relu), Policy::Recomputable);
    }
}
