//! ONNX Runtime training ops (com.microsoft) on hand-built graphs, and losses.

mod ops_common;

use ckpt_ir::build::{attr_i, attr_ints, attr_s, ModelBuilder};
use ckpt_ir::ops::{alias, policy, Policy};
use ckpt_ir::DType;
use ops_common::{producer, run, ty, val};

const MS: &str = "com.microsoft";

#[test]
fn gradient_ops_take_their_inputs_shapes() {
    let m = ModelBuilder::new(17)
        .opset(MS, 1)
        .input("x", DType::F32, "b,s,64")
        .input("dy", DType::F32, "b,s,64")
        .input("w", DType::F32, "64")
        .input("mean", DType::F32, "b,s,1")
        .input("istd", DType::F32, "b,s,1")
        .input("emb", DType::F32, "256,64")
        .input("ids", DType::I64, "b,s")
        .input("mask", DType::Bool, "b,s,64")
        .init_i64("z", &[1], &[0])
        .init_i64("e", &[1], &[-1])
        .init_i64("one", &[1], &[1])
        .node_in(MS, "GeluGrad", &["dy", "x"], &["dgelu"], vec![])
        .node_in(MS, "FastGeluGrad", &["dy", "x"], &["dfgelu"], vec![])
        .node_in(MS, "ReluGrad", &["dy", "x"], &["drelu"], vec![])
        .node_in(MS, "TanhGrad", &["dy", "x"], &["dtanh"], vec![])
        .node_in(MS, "SigmoidGrad", &["dy", "x"], &["dsig"], vec![])
        .node_in(
            MS,
            "SoftmaxGrad_13",
            &["dy", "x"],
            &["dsm"],
            vec![attr_i("axis", -1)],
        )
        .node_in(MS, "DropoutGrad", &["dy", "mask"], &["ddrop"], vec![])
        .node_in(
            MS,
            "LayerNormalizationGrad",
            &["dy", "x", "w", "mean", "istd"],
            &["dx", "dw", "db"],
            vec![attr_i("axis", -1)],
        )
        .node_in(
            MS,
            "SimplifiedLayerNormalizationGrad",
            &["dy", "x", "w", "istd"],
            &["dx2", "dw2"],
            vec![attr_i("axis", -1)],
        )
        .node("Shape", &["emb"], &["emb_shape"])
        .node_in(
            MS,
            "GatherGrad",
            &["emb_shape", "ids", "dy"],
            &["demb"],
            vec![attr_i("axis", 0)],
        )
        .node_with("Slice", &["x", "z", "e", "one"], &["xs"], vec![])
        .node("Shape", &["x"], &["x_shape"])
        .node_in(
            MS,
            "SliceGrad",
            &["xs", "x_shape", "z", "e", "one"],
            &["dxs"],
            vec![],
        )
        .node_in(
            MS,
            "ReduceSumTraining",
            &["dy", "z"],
            &["rs"],
            vec![attr_i("keepdims", 0)],
        )
        .build();
    let (g, t) = run(m);
    for n in [
        "dgelu", "dfgelu", "drelu", "dtanh", "dsig", "dsm", "ddrop", "dx", "dx2", "dxs",
    ] {
        assert_eq!(ty(&g, &t, n), "f32[b,s,64]", "{n}");
    }
    assert_eq!(ty(&g, &t, "dw"), "f32[64]");
    assert_eq!(ty(&g, &t, "db"), "f32[64]");
    assert_eq!(ty(&g, &t, "dw2"), "f32[64]");
    assert_eq!(ty(&g, &t, "demb"), "f32[256,64]");
    assert_eq!(ty(&g, &t, "xs"), "f32[b,(s - 1),64]");
    assert_eq!(ty(&g, &t, "rs"), "f32[s,64]");
}

#[test]
fn concat_training_reports_lengths() {
    let m = ModelBuilder::new(17)
        .opset(MS, 1)
        .input("x", DType::F32, "b,s,64")
        .init_i64("i0", &[1], &[0])
        .init_i64("c", &[2], &[2, 32])
        .node("Shape", &["x"], &["sh"])
        .node_with("Gather", &["sh", "i0"], &["b1"], vec![attr_i("axis", 0)])
        .node_in(
            MS,
            "ConcatTraining",
            &["b1", "c"],
            &["cat", "lens"],
            vec![attr_i("axis", 0)],
        )
        .node_in(
            MS,
            "ConcatTraining",
            &["x", "x"],
            &["xx", "xlens"],
            vec![attr_i("axis", 1)],
        )
        .build();
    let (g, t) = run(m);
    assert_eq!(val(&g, &t, "cat").as_deref(), Some("b,2,32"));
    assert_eq!(ty(&g, &t, "lens"), "i64[2]");
    assert_eq!(ty(&g, &t, "xx"), "f32[b,(2*s),64]");
    assert_eq!(val(&g, &t, "xlens").as_deref(), Some("s,s"));
}

#[test]
fn losses_and_their_gradients() {
    let m = ModelBuilder::new(17)
        .opset(MS, 1)
        .input("logits", DType::F32, "n,256")
        .input("labels", DType::I64, "n")
        .init_f32("one", &[], &[1.0])
        .node_with(
            "SoftmaxCrossEntropyLoss",
            &["logits", "labels"],
            &["loss", "lp"],
            vec![attr_s("reduction", "mean")],
        )
        .node_with(
            "SoftmaxCrossEntropyLoss",
            &["logits", "labels"],
            &["per", "lp2"],
            vec![attr_s("reduction", "none")],
        )
        .node_in(
            MS,
            "SoftmaxCrossEntropyLossGrad",
            &["one", "lp", "labels"],
            &["dlogits"],
            vec![attr_s("reduction", "mean")],
        )
        .node_with(
            "NegativeLogLikelihoodLoss",
            &["lp", "labels"],
            &["nll"],
            vec![],
        )
        .build();
    let (g, t) = run(m);
    assert_eq!(ty(&g, &t, "loss"), "f32[]");
    assert_eq!(ty(&g, &t, "lp"), "f32[n,256]");
    assert_eq!(ty(&g, &t, "per"), "f32[n]");
    assert_eq!(ty(&g, &t, "dlogits"), "f32[n,256]");
    assert_eq!(ty(&g, &t, "nll"), "f32[]");
}

#[test]
fn accumulators_and_yield_are_stateful() {
    let m = ModelBuilder::new(17)
        .opset(MS, 1)
        .input("buf", DType::F32, "64,32")
        .input("g", DType::F32, "64,32")
        .input("reset", DType::Bool, "1")
        .input("y", DType::F32, "b,10")
        .node_in(
            MS,
            "InPlaceAccumulatorV2",
            &["buf", "g", "reset"],
            &["updated"],
            vec![],
        )
        .node_in(
            MS,
            "InPlaceAccumulatorV2",
            &["buf", "g"],
            &["updated2", "acc"],
            vec![],
        )
        .node_in(
            MS,
            "YieldOp",
            &["y"],
            &["dy"],
            vec![attr_ints("full_shape_outputs", &[0])],
        )
        .build();
    let (gr, t) = run(m);
    assert_eq!(ty(&gr, &t, "updated"), "bool[1]");
    assert_eq!(ty(&gr, &t, "acc"), "f32[64,32]");
    assert_eq!(ty(&gr, &t, "dy"), "f32[b,10]");
    let acc1 = producer(&gr, "updated");
    let acc2 = producer(&gr, "acc");
    assert!(matches!(policy(&gr, acc1), Policy::Stateful(r) if r.contains("in place")));
    assert!(matches!(
        policy(&gr, producer(&gr, "dy")),
        Policy::Stateful(_)
    ));
    // ORT: `.Alias(0, 1)`: the accumulated output is the buffer, when it is produced.
    assert_eq!(alias(&gr, acc1), None);
    assert_eq!(alias(&gr, acc2), Some((1, 0)));
}
