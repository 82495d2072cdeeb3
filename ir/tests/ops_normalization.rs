//! Normalizations and reductions on hand-built graphs.

mod ops_common;

use ckpt_ir::build::{attr_i, attr_ints, ModelBuilder};
use ckpt_ir::DType;
use ops_common::{run, ty, val};

#[test]
fn layer_norm_stats_and_softmax() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F16, "b,s,64")
        .input("w", DType::F16, "64")
        .input("bias", DType::F16, "64")
        .node_with(
            "LayerNormalization",
            &["x", "w", "bias"],
            &["y", "mean", "istd"],
            vec![attr_i("axis", -1)],
        )
        .node_with(
            "LayerNormalization",
            &["x", "w"],
            &["y2", "m2"],
            vec![attr_i("axis", 1), attr_i("stash_type", 11)],
        )
        .node_with("Softmax", &["y"], &["p"], vec![attr_i("axis", -1)])
        .node_with("LogSoftmax", &["y"], &["lp"], vec![attr_i("axis", 1)])
        .output("istd", DType::F32, "")
        .output("m2", DType::F64, "")
        .output("p", DType::F16, "")
        .output("lp", DType::F16, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(ty(&g, &t, "y"), "f16[b,s,64]");
    assert_eq!(ty(&g, &t, "mean"), "f32[b,s,1]");
    assert_eq!(ty(&g, &t, "istd"), "f32[b,s,1]");
    assert_eq!(ty(&g, &t, "m2"), "f64[b,1,1]");
    assert_eq!(ty(&g, &t, "p"), "f16[b,s,64]");
    assert_eq!(ty(&g, &t, "lp"), "f16[b,s,64]");
}

#[test]
fn reductions_by_attribute_and_by_input() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "b,s,64")
        .init_i64("ax", &[2], &[0, 1])
        .node_with(
            "ReduceSum",
            &["x", "ax"],
            &["bias_grad"],
            vec![attr_i("keepdims", 0)],
        )
        .node("ReduceSum", &["x"], &["all"])
        .node_with(
            "ReduceSum",
            &["x"],
            &["noop"],
            vec![attr_i("noop_with_empty_axes", 1)],
        )
        .node_with("ReduceMean", &["x", "ax"], &["mean"], vec![])
        .node_with(
            "ArgMax",
            &["x"],
            &["am"],
            vec![attr_i("axis", -1), attr_i("keepdims", 0)],
        )
        .node("Shape", &["x"], &["sh"])
        .node_with(
            "ReduceProd",
            &["sh"],
            &["numel"],
            vec![attr_i("keepdims", 0)],
        )
        .output("bias_grad", DType::F32, "")
        .output("all", DType::F32, "")
        .output("noop", DType::F32, "")
        .output("mean", DType::F32, "")
        .output("am", DType::I64, "")
        .output("numel", DType::I64, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(ty(&g, &t, "bias_grad"), "f32[64]");
    assert_eq!(ty(&g, &t, "all"), "f32[1,1,1]");
    assert_eq!(ty(&g, &t, "noop"), "f32[b,s,64]");
    assert_eq!(ty(&g, &t, "mean"), "f32[1,1,64]");
    assert_eq!(ty(&g, &t, "am"), "i64[b,s]");
    assert_eq!(val(&g, &t, "numel").as_deref(), Some("(64*b*s)"));
}

#[test]
fn reduce_axes_attribute_before_opset_13() {
    let m = ModelBuilder::new(11)
        .input("x", DType::F32, "b,s,64")
        .node_with(
            "ReduceSum",
            &["x"],
            &["y"],
            vec![attr_ints("axes", &[-1]), attr_i("keepdims", 1)],
        )
        .output("y", DType::F32, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(ty(&g, &t, "y"), "f32[b,s,1]");
}

#[test]
fn contrib_skip_layer_norm() {
    let m = ModelBuilder::new(17)
        .opset("com.microsoft", 1)
        .input("x", DType::F16, "b,s,64")
        .input("skip", DType::F16, "b,s,64")
        .input("g", DType::F16, "64")
        .node_in(
            "com.microsoft",
            "SkipLayerNormalization",
            &["x", "skip", "g"],
            &["y", "mean", "istd", "sum"],
            vec![],
        )
        .node_in(
            "com.microsoft",
            "SkipSimplifiedLayerNormalization",
            &["x", "skip", "g"],
            &["y2", "", "istd2", "sum2"],
            vec![],
        )
        .build();
    let (gr, t) = run(m);
    assert_eq!(ty(&gr, &t, "y"), "f16[b,s,64]");
    assert_eq!(ty(&gr, &t, "mean"), "f32[b,s,1]");
    assert_eq!(ty(&gr, &t, "sum"), "f16[b,s,64]");
    assert_eq!(ty(&gr, &t, "istd2"), "f32[b,s,1]");
    assert_eq!(ty(&gr, &t, "sum2"), "f16[b,s,64]");
}
